//! `crossgpu bench matvec`: matrix–vector product bandwidth, every f16 kernel side by side, then
//! each quantized kernel (Q8_0, Q4_0, Q4_1, Q4_K, Q6_K blocks as GGUF stores them) at the shapes
//! whose columns are whole blocks, and the decoder's fused kernels beside what each replaces, at
//! one member's shapes of the preset.

use crossgpu::bench::matvec::{self, MatvecPoint};
use crossgpu::tp::DecoderConfig;
use crossgpu::QuantFormat;
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
    let formats = |cols: usize| QuantFormat::ALL.into_iter().filter(move |f| f.row_bytes(cols).is_some());
    // Weights read once per product: the time goes with rows x cols.
    let unit = |(r, c): (usize, usize)| (r * c) as u64 / 4096 + 1;
    let quant_kernels = |c: usize| formats(c).map(|f| f.kernel_names().len()).sum::<usize>();
    let runs = |(r, c): (usize, usize)| unit((r, c)) * (kernels.len() + quant_kernels(c)) as u64;
    let pb = bar(shapes.iter().map(|&s| runs(s)).sum::<u64>(), "matvec");
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
        // The quantized kernels, for the formats whose blocks tile a row.
        for (format, kernel) in formats(cols).flat_map(|f| f.kernel_names().into_iter().map(move |k| (f, k)))
        {
            pb.set_message(format!("matvec {rows}x{cols} {kernel}"));
            let got = matvec::measure_quant(&g.members()[0], kernel, format, rows, cols, 5);
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
