//! The WGSL compiler (`Shader::compile`) on random and mutated sources: every input returns a
//! shader or an error, never a panic or an abort. The seeds are the library's own kernels
//! (`wgsl/`, includes expanded), mutated by byte flips, token insertions, deletions and
//! duplications, splices of two kernels and truncations; a share of the inputs are random token
//! streams. A sample of the accepted ones is also made into pipelines on the first adapter,
//! with the validation layer on where it is installed, which must report nothing.
//!
//! `CROSSGPU_FUZZ_CASES` sets the number of inputs (2,000 by default, what CI runs); the figure
//! in the README's "Writing kernels" comes from
//! `CROSSGPU_FUZZ_CASES=100000 cargo test --release -p crossgpu-vk --test wgsl_fuzz -- --nocapture`.

use vk_native::{CompileOptions, Device, Instance, InstanceOptions, Kernel, Shader};

/// xorshift64*: a deterministic stream, the same inputs at every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const TOKENS: &[&str] = &[
    "fn",
    "let",
    "var",
    "const",
    "override",
    "struct",
    "return",
    "if",
    "else",
    "loop",
    "for",
    "while",
    "break",
    "continue",
    "switch",
    "case",
    "default",
    "@compute",
    "@workgroup_size(64)",
    "@group(0)",
    "@binding(0)",
    "@binding(7)",
    "@builtin(global_invocation_id)",
    "var<storage, read_write>",
    "var<storage, read>",
    "var<uniform>",
    "var<immediate>",
    "var<workgroup>",
    "array<f32>",
    "array<u32, 4>",
    "vec4<f32>",
    "vec3<u32>",
    "mat4x4<f32>",
    "ptr<function, i32>",
    "atomic<u32>",
    "f16",
    "f32",
    "u32",
    "i32",
    "bool",
    "true",
    "false",
    "0",
    "1u",
    "-1",
    "0xffffffffu",
    "3.5e38",
    "1e-45",
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    "<",
    ">",
    ";",
    ":",
    ",",
    ".",
    "=",
    "==",
    "+",
    "-",
    "*",
    "/",
    "%",
    "&",
    "|",
    "^",
    "!",
    "~",
    "<<",
    ">>",
    "&&",
    "||",
    "->",
    "x",
    "y",
    "main",
    "arrayLength(&x)",
    "workgroupBarrier()",
    "atomicAdd(&a, 1u)",
    "select(1, 2, true)",
    "bitcast<f32>(1u)",
    "unpack2x16float(1u)",
    "enable f16;",
    "\n",
    " ",
];

fn seeds() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../wgsl");
    let include = |src: String| -> String {
        src.lines()
            .map(|l| match l.trim().strip_prefix("// #include ") {
                Some(name) => {
                    std::fs::read_to_string(dir.join("include").join(name.trim().trim_matches('"')))
                        .unwrap_or_default()
                }
                None => format!("{l}\n"),
            })
            .collect()
    };
    let mut out: Vec<String> = std::fs::read_dir(&dir)
        .expect("wgsl/ beside vk-native/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "wgsl"))
        .map(|p| include(std::fs::read_to_string(p).unwrap()))
        .collect();
    out.sort();
    assert!(out.len() > 20, "the library's kernels are the seeds");
    out
}

/// A mutation of `base` (with `other` for splices), or a random token stream.
fn mutant(rng: &mut Rng, base: &str, other: &str) -> String {
    let mut b = base.as_bytes().to_vec();
    match rng.below(8) {
        0 => {
            for _ in 0..1 + rng.below(8) {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
        }
        1 => {
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(b.len() + 1);
                let t = TOKENS[rng.below(TOKENS.len())];
                b.splice(at..at, format!(" {t} ").into_bytes());
            }
        }
        2 => {
            let (s, n) = (rng.below(b.len()), 1 + rng.below(64));
            b.drain(s..(s + n).min(b.len()));
        }
        3 => {
            let (s, n) = (rng.below(b.len()), 1 + rng.below(200));
            let piece: Vec<u8> = b[s..(s + n).min(b.len())].to_vec();
            let at = rng.below(b.len() + 1);
            b.splice(at..at, piece);
        }
        4 => {
            let (i, j) = (rng.below(b.len()), rng.below(other.len()));
            b.truncate(i);
            b.extend_from_slice(&other.as_bytes()[j..]);
        }
        5 => b.truncate(rng.below(b.len())),
        6 => {
            return (0..rng.below(120))
                .map(|_| TOKENS[rng.below(TOKENS.len())])
                .collect::<Vec<_>>()
                .join(" ");
        }
        _ => {
            // Replace one identifier-ish run of bytes by a random token.
            let i = rng.below(b.len());
            let end = (i..b.len()).find(|&k| !b[k].is_ascii_alphanumeric()).unwrap_or(b.len());
            b.splice(i..end, TOKENS[rng.below(TOKENS.len())].bytes());
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

#[test]
fn random_and_mutated_wgsl_never_panics() {
    let cases: usize = std::env::var("CROSSGPU_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let seeds = seeds();
    // Panics inside naga are caught and become errors; keep their messages off the output.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut rng = Rng(0x5EED_F00D_CAFE_1234);
    let (mut accepted, mut internal) = (0usize, 0usize);
    let mut sample: Vec<Shader> = Vec::new();
    let start = std::time::Instant::now();
    for case in 0..cases {
        let base = &seeds[rng.below(seeds.len())];
        let other = &seeds[rng.below(seeds.len())];
        let src = mutant(&mut rng, base, other);
        let opts = CompileOptions { shader_f16: case % 3 == 0, ..Default::default() };
        match Shader::compile("fuzz.wgsl", &src, &opts) {
            Ok(s) => {
                accepted += 1;
                if sample.len() < 200 && case % 7 == 0 {
                    sample.push(s);
                }
            }
            Err(e) => {
                assert!(!e.message.is_empty(), "case {case}: an error without a message");
                internal += usize::from(e.message.contains("an internal error of naga"));
            }
        }
    }
    std::panic::set_hook(hook);
    eprintln!(
        "{cases} inputs in {:.1} s: {accepted} compiled, {} refused ({internal} of them naga's own panics, caught)",
        start.elapsed().as_secs_f64(),
        cases - accepted
    );
    // The seeds themselves compile, entry by entry (mutations aside, the harness is sound).
    assert!(accepted > 0, "no mutant compiled: the mutations are too coarse to test anything");

    // Pipelines of a sample of the accepted ones: the driver (and the layer) take naga's SPIR-V.
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    let validation =
        std::path::Path::new("/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json").exists();
    let inst = Instance::new(&InstanceOptions { validation }).expect("a Vulkan driver");
    let dev = Device::open(&inst, 0, 1).unwrap();
    let mut made = 0;
    for s in &sample {
        // Refusals for the device's limits are errors too; what must not happen is a layer error.
        if Kernel::new(&dev, s).is_ok() {
            made += 1;
        }
    }
    eprintln!("{made} of {} sampled shaders made into pipelines (validation {validation})", sample.len());
    let errors = vk_native::validation_messages();
    assert!(errors.is_empty(), "validation errors on naga's SPIR-V: {errors:#?}");
}
