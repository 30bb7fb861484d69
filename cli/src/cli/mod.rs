//! The subcommands of the `crossgpu` program.

pub mod bench;
pub mod decode;
pub mod generate;
mod load_bar;
#[cfg(feature = "mpi")]
mod mpirun;
mod profile;
pub mod soak;
mod step_settings;

pub use step_settings::StepSettings;

use crossgpu::{adapter_table, AllReduceOptions, Comm, DType, DeviceGroup, Instance, Precision};

/// What a subcommand fails with: a library error (its message says what to do) or the
/// command's own message (a failed check, an unusable flag, an I/O error with its path).
pub type CliError = Box<dyn std::error::Error + Send + Sync>;

/// The result of a subcommand.
pub type CliResult<T = ()> = std::result::Result<T, CliError>;

/// An error of the command itself, in words.
pub fn fail(msg: impl Into<String>) -> CliError {
    msg.into().into()
}

/// `crossgpu devices`.
pub fn devices() -> CliResult {
    let instance = Instance::new()?;
    print!("{}", adapter_table(instance.adapters()));
    Ok(())
}

/// Deterministic non-zero pseudo-random values (the benchmarks' generator).
fn values(seed: u64, n: usize) -> Vec<f32> {
    crossgpu::bench::data(seed, n)
}

fn max_rel_err(got: &[f32], want: &[f64]) -> f64 {
    got.iter().zip(want).map(|(&g, &w)| (g as f64 - w).abs() / w.abs().max(1.0)).fold(0.0, f64::max)
}

/// "1 member", "3 members".
pub fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Prints the group's members under a "group of N members:" line.
pub fn print_group(group: &DeviceGroup) {
    println!("group of {}:", plural(group.len(), "member", "members"));
    for m in group.members() {
        println!("  {}", m.label());
    }
}

/// Prints how the group was chosen, as a command's first line: from `CROSSGPU_DEVICES`, or the
/// command's default (`default_says`), and whether members share one physical device.
pub fn print_choice(group: &DeviceGroup, default_says: &str) {
    let from_env = std::env::var("CROSSGPU_DEVICES").is_ok_and(|v| !v.trim().is_empty());
    let how = if from_env { "as CROSSGPU_DEVICES says".to_string() } else { default_says.to_string() };
    let shared = if group.shares_a_device() {
        "; some members share one physical device, so they share its compute: this shows the all-reduce, it does not speed anything up"
    } else {
        ""
    };
    println!("members: {}, {how}{shared}", group.len());
}

/// `--len` checked against every member before anything is allocated: the demo's tensors are
/// `len` f32 values, and the host holds a few copies of them.
fn check_demo_len(group: &DeviceGroup, len: usize) -> CliResult {
    if len == 0 {
        return Err(fail("--len must be at least 1"));
    }
    for m in group.members() {
        let limit = m.adapter().caps.max_storage_buffer_range;
        let bytes = (len as u64).saturating_mul(4);
        if bytes > limit {
            return Err(fail(format!(
                "--len {len}: a tensor of {len} f32 values needs {bytes} bytes, more than {} binds in one tensor ({limit} bytes, maxStorageBufferRange); pass --len {} or less",
                m.label(),
                limit / 4
            )));
        }
    }
    Ok(())
}

/// `crossgpu demo`.
pub fn demo(len: usize) -> CliResult {
    crossgpu::check_environment()?;
    let instance = Instance::new()?;
    let group = DeviceGroup::from_env(&instance)?;
    check_demo_len(&group, len)?;
    print_choice(
        &group,
        "every adapter once (two members where there is only one; set CROSSGPU_DEVICES to choose)",
    );
    print_group(&group);
    let mut worst = 0.0f64;
    for m in group.members() {
        let seed = m.index() as u64 + 1;
        let a = values(seed, len);
        let b = values(seed + 100, len);
        let ta = m.upload_f32(&a)?;
        let tb = m.upload_f32(&b)?;
        m.add(&ta, &tb)?;
        m.scale(&ta, 0.5)?;
        let h = m.empty(&[len], DType::F16)?;
        m.convert_f32_to_f16(&tb, &h)?;
        m.add_f16_into_f32(&ta, &h)?;
        let got = ta.read()?;
        let want: Vec<f64> = (0..len)
            .map(|i| (a[i] as f64 + b[i] as f64) * 0.5 + half::f16::from_f32(b[i]).to_f64())
            .collect();
        let e1 = max_rel_err(&got, &want);
        let (rows, cols) = (64, 1000);
        let w = values(seed + 200, rows * cols);
        let x = values(seed + 300, cols);
        let tw = m.upload(&w, &[rows, cols], DType::F16)?;
        let tx = m.upload_f32(&x)?;
        let ty = m.empty(&[rows], DType::F32)?;
        m.matvec(&tw, &tx, &ty)?;
        let got = ty.read()?;
        let want: Vec<f64> = (0..rows)
            .map(|r| (0..cols).map(|k| half::f16::from_f32(w[r * cols + k]).to_f64() * x[k] as f64).sum())
            .collect();
        let e2 = max_rel_err(&got, &want);
        println!("  member {}: add/scale/convert/add_f16 max rel err {e1:.2e}, f16 matvec {rows}x{cols} max rel err {e2:.2e}", m.index());
        worst = worst.max(e1).max(e2 / 10.0);
    }
    if worst > 1e-5 {
        return Err(fail(format!("kernel check failed: relative error {worst:.2e} exceeds 1e-5")));
    }
    println!("kernels: OK on every member");

    // All-reduce: every member holds a random partial; every member must end with the sum,
    // bitwise equal across members, and match the f64 reference within f32 rounding.
    let mut comm = Comm::new(&group)?;
    println!("all-reduce mode: {} ({})", comm.mode(), comm.reason());
    for (len, precision) in [(len, Precision::F32), (len, Precision::F16), (1usize << 20, Precision::Auto)] {
        let parts: Vec<Vec<f32>> =
            group.members().iter().map(|m| values(1000 + m.index() as u64, len)).collect();
        let mut tensors = group
            .members()
            .iter()
            .zip(&parts)
            .map(|(m, p)| m.upload_f32(p))
            .collect::<crossgpu::Result<Vec<_>>>()?;
        comm.all_reduce(&mut tensors, &AllReduceOptions { precision, ..Default::default() })?;
        let f16_wire = precision == Precision::F16 || (precision == Precision::Auto && len * 4 >= 1 << 20);
        let want: Vec<f64> = (0..len)
            .map(|i| {
                parts
                    .iter()
                    .map(|p| if f16_wire { half::f16::from_f32(p[i]).to_f64() } else { p[i] as f64 })
                    .sum()
            })
            .collect();
        let results = tensors.iter().map(|t| t.read()).collect::<crossgpu::Result<Vec<_>>>()?;
        let identical =
            results.iter().all(|r| r.iter().map(|v| v.to_bits()).eq(results[0].iter().map(|v| v.to_bits())));
        let err = max_rel_err(&results[0], &want);
        // f32 accumulation of N terms: at most (N-1) roundings of 2^-24 relative to the sum of |terms|.
        let bound = group.len() as f64 * 2f64.powi(-24) * group.len() as f64;
        let wire = if f16_wire { "f16" } else { "f32" };
        println!("  {len} elements, {wire} wire: max rel err {err:.2e} (bound {bound:.1e}), members bitwise equal: {identical}");
        if !identical || err > bound {
            return Err(fail(format!(
                "all-reduce check failed: {len} elements, {wire} wire: error {err:.2e} (bound {bound:.1e}), members bitwise equal: {identical}"
            )));
        }
    }
    println!("all-reduce: OK");
    Ok(())
}
