//! The collectives beside the f32 sum across ranks (`comm/collectives.rs` in one process): each
//! rank checks its own tensors, the ranks agree on the call (its kind, op, root, dtype and every
//! member's lengths, so the checks of the whole call are the same on every rank), MPI gathers
//! the words every member sends, and each rank combines them for its members on the host by
//! the rule the devices follow (`comm::exchange::evaluate`), so every member of every rank ends
//! with the same bits. This is the gather path whichever [`RankPath`](super::RankPath) the
//! communicator took: the shared-memory slots carry only the f32 sum.

use std::borrow::Borrow;

use super::RankComm;
use crate::comm::collectives::Collective;
use crate::comm::exchange::{evaluate, kind_code};
use crate::comm::ReduceOp;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// Words of a call's header before the members' lengths: call (2), collective (3), dtype,
/// verdict, members.
const FIXED: usize = 8;

impl RankComm {
    /// All-gather over every member of every rank ([`Comm::all_gather`](crate::Comm::all_gather)):
    /// `recv` of every member receives every global member's `send`, in global order (rank, then
    /// index). Every rank calls it.
    pub fn all_gather<S: Borrow<Tensor>, R: Borrow<Tensor>>(
        &mut self,
        send: &[S],
        recv: &mut [R],
    ) -> Result<()> {
        let send: Vec<&Tensor> = send.iter().map(Borrow::borrow).collect();
        let recv: Vec<&Tensor> = recv.iter().map(Borrow::borrow).collect();
        self.collective(Collective::AllGather, &send, &recv)
    }

    /// Reduce-scatter over every member of every rank
    /// ([`Comm::reduce_scatter`](crate::Comm::reduce_scatter)): segments in global member order.
    pub fn reduce_scatter<S: Borrow<Tensor>, R: Borrow<Tensor>>(
        &mut self,
        send: &[S],
        recv: &mut [R],
        op: ReduceOp,
    ) -> Result<()> {
        let send: Vec<&Tensor> = send.iter().map(Borrow::borrow).collect();
        let recv: Vec<&Tensor> = recv.iter().map(Borrow::borrow).collect();
        self.collective(Collective::ReduceScatter(op), &send, &recv)
    }

    /// Broadcast from global member `root` ([`RankComm::global_members`]) to every member of
    /// every rank.
    pub fn broadcast<T: Borrow<Tensor>>(&mut self, tensors: &mut [T], root: usize) -> Result<()> {
        let t: Vec<&Tensor> = tensors.iter().map(Borrow::borrow).collect();
        self.collective(Collective::Broadcast { root }, &t, &t)
    }

    /// Reduce to global member `root`; every other member's tensor stays.
    pub fn reduce<T: Borrow<Tensor>>(&mut self, tensors: &mut [T], root: usize, op: ReduceOp) -> Result<()> {
        let t: Vec<&Tensor> = tensors.iter().map(Borrow::borrow).collect();
        self.collective(Collective::Reduce { root, op }, &t, &t)
    }

    pub(super) fn collective(&mut self, c: Collective, send: &[&Tensor], recv: &[&Tensor]) -> Result<()> {
        if let Some(p) = &self.poisoned {
            return Err(Error::Poisoned("the communicator across ranks".into(), p.clone()));
        }
        let local = self.local.check_tensors(c, send, recv);
        self.calls += 1;
        let (dtype, send_lens, recv_lens) = match &local {
            Ok((d, s, r)) => (*d, s.clone(), r.clone()),
            Err(_) => (DType::F32, vec![0; send.len()], vec![0; send.len()]),
        };
        let [kind, op, root] = c.code();
        let call = [self.calls as u32, (self.calls >> 32) as u32, kind, op, root, kind_code(dtype)];
        let mut header = call.to_vec();
        header.push(u32::from(local.is_ok()));
        header.push(send_lens.len() as u32);
        for (&s, &r) in send_lens.iter().zip(&recv_lens) {
            header.extend([s as u32, (s as u64 >> 32) as u32, r as u32, (r as u64 >> 32) as u32]);
        }
        let headers = self.run(|mpi, t| mpi.gather(header, t, "the ranks' collective calls"))?;
        local?;
        let name = c.name();
        if let Some(r) = headers.iter().position(|h| h.get(6) != Some(&1)) {
            return Err(Error::InvalidArgument(format!(
                "RankComm::{name}: rank {r} refused the call (its arguments were invalid; its error says why)"
            )));
        }
        if let Some(r) = headers.iter().position(|h| h[..6] != call) {
            let e = Error::InvalidArgument(format!(
                "RankComm::{name}: rank {} made call {} as {call:?} (call, kind, op, root, dtype), rank {r} as {:?}: every rank must make the same calls",
                self.mpi.rank,
                self.calls,
                &headers[r][..6]
            ));
            self.poisoned = Some(e.to_string());
            return Err(e);
        }
        // Every member's lengths, in global order; the checks of the whole call, the same on
        // every rank (so a refusal is every rank's, and writes nothing).
        let (mut all_send, mut all_recv) = (Vec::new(), Vec::new());
        for h in &headers {
            let members = h.get(7).copied().unwrap_or(0) as usize;
            for m in h[FIXED..].chunks_exact(4).take(members) {
                all_send.push((u64::from(m[0]) | u64::from(m[1]) << 32) as usize);
                all_recv.push((u64::from(m[2]) | u64::from(m[3]) << 32) as usize);
            }
        }
        c.check(&vec![dtype; all_send.len()], &all_send, &all_recv).map_err(|e| {
            Error::InvalidArgument(format!("RankComm::{name} over every rank's members: {e}"))
        })?;
        let extent = c.extent(&all_send);
        if extent == 0 {
            return Ok(());
        }
        let spec = c.round(&all_send, &all_recv, 0, extent);
        let words = |g: usize| spec.sends[g].filter(|s| s.n > 0).map(|s| s.words(dtype));
        let total_words: usize = (0..all_send.len()).filter_map(words).map(|(_, w)| w).sum();
        if total_words > i32::MAX as usize {
            return Err(Error::Unsupported(format!(
                "RankComm::{name} of {total_words} words over every rank: the gather holds at most 2^31 - 1; split the tensors"
            )));
        }
        let own = self.own_members();
        let mut mine = Vec::new();
        for (i, g) in own.clone().enumerate() {
            if let Some((w0, w)) = words(g) {
                mine.extend_from_slice(&send[i].read_words()?[w0..w0 + w]);
            }
        }
        let gathered = self.run(|mpi, t| mpi.gather(mine, t, "the members' words"))?;
        // Split each rank's words by its members' sends.
        let mut regions: Vec<Vec<u32>> = vec![Vec::new(); all_send.len()];
        let mut g = 0;
        for (rank, words_of_rank) in gathered.iter().enumerate() {
            let mut at = 0;
            while g < self.members.len() && self.members[g].rank == rank {
                if let Some((_, w)) = words(g) {
                    let Some(part) = words_of_rank.get(at..at + w) else {
                        let e = Error::InvalidArgument(format!(
                            "RankComm::{name}: rank {rank} sent too few words"
                        ));
                        self.poisoned = Some(e.to_string());
                        return Err(e);
                    };
                    regions[g] = part.to_vec();
                    at += w;
                }
                g += 1;
            }
        }
        let regions: Vec<&[u32]> = regions.iter().map(Vec::as_slice).collect();
        let scale = 1.0 / all_send.len() as f32;
        let members = self.local.members().to_vec();
        let write = || -> Result<()> {
            for (i, g) in own.clone().enumerate() {
                for dst in 0..2 {
                    let places: Vec<_> = spec.places[g].iter().filter(|p| p.dst == dst && p.n > 0).collect();
                    if places.is_empty() {
                        continue;
                    }
                    let t = if dst == 0 { send[i] } else { recv[i] };
                    let mut image = t.read_words()?;
                    for p in places {
                        evaluate(dtype, scale, p, &regions, &mut image);
                    }
                    members[i].write_bytes(t, bytemuck::cast_slice(&image))?;
                }
            }
            Ok(())
        };
        let r = write();
        if let Err(e) = &r {
            self.poisoned = Some(e.to_string());
        }
        r
    }
}
