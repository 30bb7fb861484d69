//! The draw of the next token on the devices: the settings written into every member's
//! settings tensor (the step's kernels read it when they run, so a recorded step follows a
//! change), what the devices cannot draw, and the drawn token read back.

use super::state::Decoder;
use crate::error::{Error, Result};
use crate::sample::{DeviceSampling, Sampling};

impl Decoder {
    /// Why the members cannot draw as `sampling` says (`None`: they can). They keep at most
    /// [`Decoder::sampling_room`] candidates each, so a larger `top_k` — or `top_p` below 1
    /// without a `top_k` — is drawn on the host ([`crate::model::Sampler`]). A nucleus is cut
    /// by exponentials that each member computes alike, which drivers may round differently:
    /// it is drawn on the devices only where every member is the same device and driver.
    pub fn device_sampling_unsupported(&self, sampling: &Sampling) -> Option<String> {
        let DeviceSampling::TopK { k, nucleus } = DeviceSampling::of(sampling, self.cfg.vocab) else {
            return None;
        };
        if k > self.room {
            return Some(match sampling.top_k {
                0 => format!(
                    "top-p {} without a top-k: the nucleus may hold any of the {} tokens, and each member keeps {} candidates",
                    sampling.top_p, self.cfg.vocab, self.room
                ),
                _ => format!("top-k {k}: each member keeps at most {} candidates", self.room),
            });
        }
        if nucleus && self.remote.is_some() {
            return Some("top-p across processes: their drivers may round the nucleus differently".into());
        }
        let first = self.members[0].adapter();
        let same = |m: &crate::Member| {
            let a = m.adapter();
            (a.vendor_id, a.device_id, &a.driver_id, &a.driver_info)
                == (first.vendor_id, first.device_id, &first.driver_id, &first.driver_info)
        };
        if nucleus && !self.members.iter().all(same) {
            return Some(
                "top-p over members of different devices or drivers, which may round the nucleus differently"
                    .into(),
            );
        }
        None
    }

    /// Candidates each member keeps for a draw on the devices: 64, or fewer where three f32
    /// for each of every member's would pass the hidden size (the size of the all-reduce the
    /// communicator is made for).
    pub fn sampling_room(&self) -> usize {
        self.room
    }

    /// Draws every next token on the devices as `sampling` says, from the next step on
    /// (greedy until then). The settings are checked; where the devices cannot draw them
    /// ([`Decoder::device_sampling_unsupported`]) this is an error and nothing changes; a
    /// write that fails on a member leaves the decoder broken (its members could disagree). A
    /// draw at position `p` (the position of the step that computed the logits) is the
    /// token [`crate::model::Sampler::sample_at`] draws from those logits at `p`.
    pub fn set_sampling(&mut self, sampling: Sampling) -> Result<()> {
        sampling.validate()?;
        if let Some(why) = self.device_sampling_unsupported(&sampling) {
            return Err(Error::Unsupported(format!("drawing on the devices: {why}")));
        }
        self.check_usable()?;
        let words = sampling.device_settings(self.cfg.vocab);
        let written: Result<()> =
            self.members.iter().zip(self.act.settings.parts()).try_for_each(|(m, t)| m.write_u32(t, &words));
        // Members left with different settings would draw different tokens: a failed write
        // breaks the decoder.
        written.map_err(|e| self.broken(e))?;
        self.sampling = sampling;
        Ok(())
    }

    /// Whether this process holds every logit ([`Decoder::logits`] reads only this process's
    /// members: a model split across MPI ranks holds a share).
    pub fn holds_every_logit(&self) -> bool {
        self.remote.is_none()
    }

    /// The settings the devices draw with.
    pub fn sampling(&self) -> &Sampling {
        &self.sampling
    }

    /// The token the last step chose, which the next step embeds (waits for the step). Every
    /// member holds it; this reads the first.
    pub fn next_token(&self) -> Result<u32> {
        let t = self.act.token.part(0)?.read_u32()?;
        Ok(t[0])
    }

    /// Every member's copy of the next token (they must be equal).
    pub fn next_tokens(&self) -> Result<Vec<u32>> {
        self.act.token.parts().iter().map(|t| Ok(t.read_u32()?[0])).collect()
    }
}
