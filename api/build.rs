//! Compiles `proto/airlock/api/v1/*.proto` with protox (a pure-Rust protobuf
//! compiler), so building needs no system `protoc`.

use std::path::Path;

const PROTOS: &[&str] = &[
    "airlock/api/v1/code.proto",
    "airlock/api/v1/errors.proto",
    "airlock/api/v1/events.proto",
    "airlock/api/v1/files.proto",
    "airlock/api/v1/ingress.proto",
    "airlock/api/v1/keys.proto",
    "airlock/api/v1/network.proto",
    "airlock/api/v1/processes.proto",
    "airlock/api/v1/sandboxes.proto",
    "airlock/api/v1/templates.proto",
    "airlock/api/v1/usage.proto",
    "airlock/api/v1/workspaces.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read at run time: a build script binary can be reused across checkouts.
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")?;
    let root = Path::new(&manifest_dir).join("../proto");
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={}", root.join(proto).display());
    }
    let descriptors = protox::compile(PROTOS, [&root])?;
    tonic_prost_build::configure()
        .build_transport(false)
        // Undecodable messages are the client's fault (`src/codec.rs`).
        .codec_path("crate::codec::Codec")
        .bytes(".airlock.api.v1")
        // Written by hand (in `lib.rs`), without the values.
        .skip_debug([
            ".airlock.api.v1.Secret",
            ".airlock.api.v1.CreateKeyResponse",
        ])
        .compile_fds(descriptors)?;
    Ok(())
}
