//! The decoder in every all-reduce mode lavapipe runs gives the same bits: DevicePoll fuses
//! each row-parallel product with its all-reduce (the product writes straight into the
//! member's slot, the next norm sums the slots: `reduce_add_rmsnorm`), HostBridge and Generic
//! do not; the logits and every member's residual stream must be bitwise equal after every
//! run, and the tokens those of one member. The validation layer is on.

use crate::common::{self, serial};

use crossgpu::tp::{Decoder, DecoderConfig, SplitSpec};
use crossgpu::{Comm, CommOptions, Error, Mode, ModeRequest};

const STEPS: usize = 8;

/// A run's tokens, logits, every member's residual stream, and dispatches per layer and member.
type Run = (Vec<u32>, Vec<f32>, Vec<Vec<f32>>, f64);

/// The small model, and two whose hidden sizes take the norms past their first batch of 2048
/// elements per workgroup (4100: held in registers between the passes) and past the 8192 they
/// hold (8200: read back), with as little else as possible.
fn configs() -> [DecoderConfig; 3] {
    let small = DecoderConfig { layers: 2, vocab: 500, max_seq: 20, ..DecoderConfig::small() };
    let wide = DecoderConfig { hidden: 4100, ffn: 96, layers: 1, vocab: 300, ..small.clone() };
    let wider = DecoderConfig { hidden: 8200, ..wide.clone() };
    [small, wide, wider]
}

fn decode(cfg: &DecoderConfig, members: usize, split: &SplitSpec, mode: Mode) -> Option<Run> {
    let g = common::logical(members);
    let opts = CommOptions { mode: ModeRequest::Forced(mode), ..CommOptions::from_env().unwrap() };
    let comm = match Comm::with_options(&g, opts) {
        Ok(c) => c,
        // Too few llvmpipe threads, or (GPU machine layouts) two members on one GPU.
        Err(Error::Unsupported(why)) if common::mode_refused_by_layout(mode, &why) => {
            common::skip(common::requirement(mode), &format!("{mode} over {members} members: {why}"));
            return None;
        }
        Err(e) => panic!("{mode} over {members} members: {e}"),
    };
    assert_eq!(comm.mode(), mode, "{}", comm.reason());
    let mut d = Decoder::with_comm(&g, cfg.clone(), split, Some(comm)).unwrap();
    let tokens = d.generate(7, STEPS, |_| {}).unwrap();
    let s = d.stats();
    let per_layer = s.dispatches as f64 / (s.tokens * s.members * cfg.layers) as f64;
    Some((tokens, d.logits().unwrap(), d.residuals().unwrap(), per_layer))
}

#[test]
fn fused_device_poll_gives_the_bits_of_host_bridge_and_generic() {
    let _s = serial();
    for cfg in configs() {
        let one = {
            let g = common::logical(1);
            Decoder::new(&g, cfg.clone(), &SplitSpec::Even).unwrap().generate(7, STEPS, |_| {}).unwrap()
        };
        let splits = if cfg.hidden > 4096 {
            vec![(2, SplitSpec::Even)]
        } else {
            vec![(2, SplitSpec::Even), (3, SplitSpec::parse("1:2:1").unwrap())]
        };
        for (members, split) in splits {
            let Some(bridge) = decode(&cfg, members, &split, Mode::HostBridge) else { continue };
            let Some(generic) = decode(&cfg, members, &split, Mode::Generic) else { continue };
            let Some(poll) = decode(&cfg, members, &split, Mode::DevicePoll) else { continue };
            eprintln!(
                "hidden {}, {members} members: dispatches per layer per member (embed, head and token \
             included): HostBridge {:.2}, Generic {:.2}, DevicePoll {:.2}",
                cfg.hidden, bridge.3, generic.3, poll.3
            );
            assert_eq!(bridge.0, one, "{members} members: HostBridge tokens vs one member's");
            for (name, run) in [("Generic", &generic), ("DevicePoll", &poll)] {
                assert_eq!(run.0, bridge.0, "{members} members, {name}: tokens");
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&run.1), bits(&bridge.1), "{members} members, {name}: logits bitwise");
                for (i, (a, b)) in run.2.iter().zip(&bridge.2).enumerate() {
                    assert_eq!(bits(a), bits(b), "{members} members, {name}: member {i}'s residual bitwise");
                }
            }
        }
    }
    common::assert_no_validation_errors();
}

/// `Decoder::set_fold_norms`: on one member with nothing to reduce with, the folded decoder
/// has each output projection leave the next residual norm pending (`matvec_add_norm_pending`
/// into the stream) for the normed q/k/v and gate/up kernels to finish (`rmsnorm` before the
/// readers that cannot, the vocabulary's); the default writes every norm with `add_rmsnorm`.
/// Where the hidden size keeps the products unfused (4100, not a multiple of 8) nothing is
/// left pending: tokens, logits and residual bitwise equal. Where the fused kernels finish the
/// norm (256, and 8200, past the 8192 elements rmsnorm holds in registers) the scale
/// multiplies each finished sum instead, which rounds differently: not the same bits, but the
/// same tokens, 2 dispatches fewer per layer but for the final norm's,
/// and logits and residual within 1e-5 of their largest magnitude (the derived per-element
/// tolerance of the folded decoder against f64 is
/// `tp_model::step_by_step_logits_match_cpu_reference_and_one_member`'s). Once a step is
/// recorded for replay the setting cannot change. (And the seeded f16 weights refuse
/// `set_q8_activations`: none of them takes 8-bit inputs.)
#[test]
fn folded_norms_decode_as_the_norm_dispatches() {
    let _s = serial();
    for cfg in configs() {
        let run = |fold: bool| {
            // A group of its own: the members' dispatch counters add up over their lifetime.
            let g = common::logical(1);
            let mut d = Decoder::new(&g, cfg.clone(), &SplitSpec::Even).unwrap();
            d.set_fold_norms(fold).unwrap();
            // f16 weights have no product with 8-bit inputs.
            let q8 = d.set_q8_activations(true);
            assert!(matches!(q8, Err(Error::Unsupported(_))), "{q8:?}");
            assert!(!d.quantizes_activations());
            assert!(!d.q8_activations_pay(), "f16 weights: 8-bit inputs cannot pay");
            let tokens = d.generate(7, STEPS, |_| {}).unwrap();
            assert!(d.replays(), "one member replays its steps");
            let refused = d.set_fold_norms(!fold);
            assert!(matches!(refused, Err(Error::InvalidArgument(_))), "{refused:?}");
            assert_eq!(d.folds_norms(), fold);
            let s = d.stats();
            let per_token = s.dispatches as f64 / s.tokens as f64;
            (tokens, d.logits().unwrap(), d.residuals().unwrap().remove(0), per_token)
        };
        let (folded, written) = (run(true), run(false));
        let what = format!("hidden {}", cfg.hidden);
        eprintln!("{what}: dispatches per token: folded {:.2}, written {:.2}", folded.3, written.3);
        assert_eq!(folded.0, written.0, "{what}: tokens");
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        if !cfg.hidden.is_multiple_of(8) {
            assert_eq!(folded.3, written.3, "{what}: nothing to fold");
            assert_eq!(bits(&folded.1), bits(&written.1), "{what}: logits bitwise");
            assert_eq!(bits(&folded.2), bits(&written.2), "{what}: residual bitwise");
            continue;
        }
        assert_eq!(
            written.3 - folded.3,
            (2 * cfg.layers - 1) as f64,
            "{what}: two norm dispatches saved per layer, less the final norm's rmsnorm"
        );
        // Bitwise equal logits would mean the norms were not folded (the scale rounds apart).
        assert!(
            bits(&folded.1) != bits(&written.1),
            "{what}: the folded run's logits are the written run's bits"
        );
        for (part, a, b) in [("logits", &folded.1, &written.1), ("residual", &folded.2, &written.2)] {
            let largest = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let worst = a.iter().zip(b.iter()).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
            eprintln!("{what}: {part}: largest |difference| {worst:e} of magnitude {largest:e}");
            assert!(worst <= 1e-5 * largest, "{what}: {part} differ by {worst:e} (largest {largest:e})");
        }
    }
    common::assert_no_validation_errors();
}
