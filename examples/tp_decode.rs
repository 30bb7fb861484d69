//! Tensor-parallel greedy decoding across a group: the same program as `crossgpu decode`.
//!
//! ```text
//! cargo run --release --example tp_decode -- --tokens 32 --check
//! CROSSGPU_DEVICES=0x2 cargo run --release --example tp_decode -- --preset 27b --tokens 32
//! ```
//!
//! Loads a decoder whose weights are generated on the devices from a seed, decodes `--tokens`
//! tokens with a progress bar, and prints tokens/s, CPU time, all-reduces and submits per
//! token, and the all-reduce mode; `--check` decodes again on one member and compares tokens.

use clap::Parser;

#[path = "../src/cli/decode.rs"]
mod decode;

#[derive(Parser)]
#[command(about = "Tensor-parallel greedy decoding across a crossgpu group")]
struct Args {
    #[command(flatten)]
    decode: decode::DecodeArgs,
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    if let Err(e) = decode::decode(&Args::parse().decode) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
