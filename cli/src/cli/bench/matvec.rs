//! `crossgpu bench matvec`: matrix–vector product bandwidth, every f16 kernel side by side, and
//! the decoder's fused kernels beside what each replaces, at one member's shapes of the preset.

use crossgpu::bench::matvec::{self, MatvecPoint};
use crossgpu::tp::DecoderConfig;
use indicatif::ProgressBar;

use super::report::Run;
use super::settings::parse_shape;
use super::text::{bar, say, sig3};
use crate::cli::CliResult;

/// `bench matvec`, and the third part of `bench all`.
pub fn bench_matvec(run: &mut Run) -> CliResult {
    let g = run.open(run.a)?;
    let shapes: Vec<(usize, usize)> = run.s.matvec_shapes.iter().filter_map(|s| parse_shape(s)).collect();
    let kernels = crossgpu::MATVEC_F16_KERNELS;
    // Weights read once per product: the time goes with rows x cols.
    let unit = |(r, c): (usize, usize)| (r * c) as u64 / 4096 + 1;
    let pb = bar(shapes.iter().map(|&s| unit(s)).sum::<u64>() * kernels.len() as u64, "matvec");
    for (rows, cols) in shapes {
        // Every f16 kernel for cols % 8 == 0, side by side (other shapes: recorded as skipped).
        for kernel in kernels {
            pb.set_message(format!("matvec {rows}x{cols} {kernel}"));
            let got = matvec::measure_with(&g.members()[0], Some(kernel), rows, cols, 5);
            pb.inc(unit((rows, cols)));
            match got {
                Ok(p) => {
                    say(&pb, matvec_row(&p));
                    run.r.matvec.push(p);
                    run.save()?;
                }
                Err(e) => run.skip(&pb, format!("matvec {rows}x{cols} {kernel}: {e}"))?,
            }
        }
    }
    pb.finish_and_clear();
    // The decoder's fused kernels beside what each replaces, at one member's shapes of the
    // preset (--preset: 27b on a GPU that holds it, small on a CPU device).
    let cfg = DecoderConfig::preset(&run.s.preset).map_err(|e| e.for_setting("--preset"))?;
    let shape = (cfg.hidden, cfg.ffn, cfg.q_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.head_dim);
    match matvec::measure_decoder_kernels(&g.members()[0], shape, 5) {
        Ok(points) => {
            for p in points {
                println!("{}", matvec_row(&p));
                run.r.matvec.push(p);
            }
            run.save()?;
        }
        Err(e) => {
            run.skip(&ProgressBar::hidden(), format!("decoder kernels of --preset {}: {e}", run.s.preset))?
        }
    }
    Ok(())
}

fn matvec_row(m: &MatvecPoint) -> String {
    format!(
        "matvec {}x{} ({}): {} GB/s, {} us",
        m.rows,
        m.cols,
        m.kernel,
        sig3(m.gbps.median),
        sig3(m.us_per_matvec.median)
    )
}
