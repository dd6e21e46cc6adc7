//! Compiles `airlock/agent/v1/*.proto` with protox (a pure-Rust protobuf
//! compiler), so building needs no system `protoc`.

use std::path::Path;

const PROTOS: &[&str] = &[
    "airlock/agent/v1/code.proto",
    "airlock/agent/v1/files.proto",
    "airlock/agent/v1/health.proto",
    "airlock/agent/v1/network.proto",
    "airlock/agent/v1/process.proto",
    "airlock/agent/v1/system.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Without the `grpc` feature there is no generated code to build.
    if std::env::var_os("CARGO_FEATURE_GRPC").is_none() {
        return Ok(());
    }
    // Read at run time: a build script binary can be reused across checkouts.
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")?;
    let root = Path::new(&manifest_dir);
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={}", root.join(proto).display());
    }
    let descriptors = protox::compile(PROTOS, [root])?;
    tonic_prost_build::configure()
        // No `XClient::connect(endpoint)` constructors: clients are built
        // on a channel (`XClient::new`), and `Process.Connect` needs the name.
        .build_transport(false)
        .bytes(".airlock.agent.v1")
        .compile_fds(descriptors)?;
    Ok(())
}
