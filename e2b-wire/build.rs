//! Compiles `proto/e2b/envd/{process,filesystem}` with protox (no system
//! `protoc`), prost-build (the messages) and pbjson-build (their proto3
//! JSON mapping, as Connect's JSON codec needs it).

use std::path::{Path, PathBuf};

const PROTOS: &[&str] = &[
    "e2b/envd/process/process.proto",
    "e2b/envd/filesystem/filesystem.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read at run time: a build script binary can be reused across checkouts.
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let root = Path::new(&manifest_dir).join("../proto");
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={}", root.join(proto).display());
    }
    let descriptors = protox::compile(PROTOS, [&root])?;
    let encoded = prost::Message::encode_to_vec(&descriptors);
    prost_build::Config::new()
        // Timestamps with their JSON form (RFC 3339 text).
        .compile_well_known_types()
        .extern_path(".google.protobuf", "::pbjson_types")
        .compile_fds(descriptors)?;
    pbjson_build::Builder::new()
        .register_descriptors(&encoded)?
        // Newer SDKs may send fields this server does not know: proto3
        // JSON says to skip them.
        .ignore_unknown_fields()
        .out_dir(&out_dir)
        .build(&[".process", ".filesystem"])?;
    Ok(())
}
