//! The library's integration tests in one binary: one link instead of sixteen, and one lock
//! (`common::serial`) that every test takes, so that a validation-layer message is reported by
//! the test that caused it (the layer's messages are collected process-wide), live-object counts
//! compare like with like, and lavapipe has the cores to itself. Each module is one subject.
//! Tests that need a process of their own stay apart: `validation_canary.rs` (errors on purpose),
//! `reliability.rs` and `wgpu_embedding.rs` (loggers of their own), `ranks.rs` (mpirun).
//!
//! Run one subject with a filter: `cargo test --test suite -- two_comms::`.

#[path = "../common/mod.rs"]
mod common;

mod allreduce;
mod collectives;
mod decode_modes;
mod drop_orders;
mod errors;
mod gguf_model;
mod groups;
mod hf_model;
mod kernels;
mod poll;
mod prompt;
mod properties;
mod quant_matvec;
mod quant_q8;
mod replay;
mod sampling;
mod sync_fd;
mod teardown;
mod tp_decoder;
mod tp_kernels;
mod tp_linear;
mod tp_model;
mod two_comms;
mod user_kernels;
mod warm_l2;
