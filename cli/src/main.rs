//! The `crossgpu` command (crate `crossgpu-cli`): `devices` lists adapters and capabilities,
//! `demo` runs kernels and an all-reduce on a group and checks them against the CPU, `decode`
//! runs the tensor-parallel decoder on seeded weights, `generate` a GGUF model's text from a
//! prompt, `bench` measures, `soak` runs many checked rounds. The
//! library (`crossgpu`) carries none of this command's dependencies.

use clap::{Parser, Subcommand};

mod cli;

#[derive(Parser)]
#[command(
    name = "crossgpu",
    version,
    about = "Compute on several Vulkan GPUs at once and all-reduce across them"
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print every Vulkan adapter and the capabilities crossgpu depends on.
    Devices,
    /// Open a group (CROSSGPU_DEVICES, default every adapter or two members on the only one),
    /// run each kernel on each member and an all-reduce across them, checked against the CPU.
    Demo {
        /// Elements per tensor.
        #[arg(long, default_value_t = 100_003)]
        len: usize,
    },
    /// Greedy decoding of a tensor-parallel decoder across the group (random weights from a
    /// seed): tokens/s, all-reduces and submits per token, `--check` against one member.
    Decode(cli::decode::DecodeArgs),
    /// Text from a GGUF model (llama family) and a prompt, the model split across the group
    /// (CROSSGPU_DEVICES; default one member per GPU): greedy, until end of sequence or --tokens.
    Generate(cli::generate::GenerateArgs),
    /// Benchmarks: limits, all-reduce against the wgpu baseline, matvec, decode; JSON + charts.
    Bench(cli::bench::BenchArgs),
    /// Reliability soak: many all-reduce rounds with changing sizes, every --check-every-th
    /// checked against the CPU and bitwise across members; memory and handles before and after.
    Soak(cli::soak::SoakArgs),
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    let result: cli::CliResult = match args.command {
        Command::Devices => cli::devices(),
        Command::Demo { len } => cli::demo(len),
        Command::Decode(args) => cli::decode::decode(&args),
        Command::Generate(args) => cli::generate::generate(&args),
        Command::Bench(args) => cli::bench::bench(&args),
        Command::Soak(args) => cli::soak::soak(&args),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
