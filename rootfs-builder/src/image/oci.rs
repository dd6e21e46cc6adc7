//! Reading container images from disk: an OCI image layout (what
//! `skopeo copy ... oci:DIR` writes) or an unpacked `docker save` archive.
//!
//! [`read_layout`] follows `index.json` (through nested indexes, choosing
//! `linux/amd64`) to one image manifest and returns its layer files in order
//! and the image config's `Env`. [`read_docker`] reads `manifest.json` of a
//! `docker save` archive; newer Docker writes an OCI layout in the same tar,
//! which [`read_any`] prefers. Every blob read from a layout is checked
//! against its `sha256:` digest.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

const INDEX_TYPES: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];
/// How deep nested indexes may go.
const MAX_INDEX_DEPTH: usize = 4;

/// A container image that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// A file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A JSON document is malformed.
    #[error("{path} is not valid JSON")]
    Json {
        /// The file.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// The layout does not have what an image needs.
    #[error("{path}: {detail}")]
    Layout {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A blob does not match its digest.
    #[error("blob {digest} is corrupt (its content hashes to sha256:{actual})")]
    Digest {
        /// The digest the manifest names.
        digest: String,
        /// What the content hashes to.
        actual: String,
    },
}

/// An image's layers (bottom first) and its configured environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageLayers {
    /// Layer files, lowest first.
    pub layers: Vec<PathBuf>,
    /// `KEY=VALUE` entries from the image config's `Env`.
    pub env: Vec<String>,
    /// The manifest's bytes: they name every layer by digest, so they
    /// identify the image.
    pub manifest: Vec<u8>,
}

/// Reads an OCI layout if `dir` has `index.json`, else a `docker save` tree.
pub fn read_any(dir: &Path, reference: Option<&str>) -> Result<ImageLayers, OciError> {
    if dir.join("index.json").is_file() {
        read_layout(dir, reference)
    } else if dir.join("manifest.json").is_file() {
        read_docker(dir, reference)
    } else {
        Err(OciError::Layout {
            path: dir.to_owned(),
            detail: "neither index.json (OCI layout) nor manifest.json (docker save) found".into(),
        })
    }
}

/// Reads an OCI image layout. `reference` picks a manifest by its
/// `org.opencontainers.image.ref.name` annotation when the index has several.
pub fn read_layout(dir: &Path, reference: Option<&str>) -> Result<ImageLayers, OciError> {
    let index_path = dir.join("index.json");
    let mut document = read_json(&index_path)?;
    let mut manifest_bytes = Vec::new();
    let mut depth = 0;
    loop {
        let is_index = (document.get("manifests").is_some() && document.get("layers").is_none())
            || media_type(&document).is_some_and(|t| INDEX_TYPES.contains(&t));
        if !is_index {
            break;
        }
        depth += 1;
        if depth > MAX_INDEX_DEPTH {
            return Err(layout(dir, "image indexes nest too deep"));
        }
        let descriptor =
            choose(&document, if depth == 1 { reference } else { None }).ok_or_else(|| {
                match reference {
                    Some(r) => layout(
                        dir,
                        &format!("no manifest for reference {r:?} (linux/amd64)"),
                    ),
                    None => layout(dir, "no linux/amd64 image manifest in the index"),
                }
            })?;
        let digest = digest_of(&descriptor, dir)?;
        manifest_bytes = read_blob(dir, &digest)?;
        document = parse(&manifest_bytes, &blob_path(dir, &digest)?)?;
    }
    let layers = document
        .get("layers")
        .and_then(Value::as_array)
        .ok_or_else(|| layout(dir, "the image manifest has no layers"))?
        .iter()
        .map(|layer| {
            let digest = digest_of(layer, dir)?;
            verify_blob(dir, &digest)?;
            blob_path(dir, &digest)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let env = match document.get("config") {
        Some(config) => {
            let digest = digest_of(config, dir)?;
            let bytes = read_blob(dir, &digest)?;
            config_env(&parse(&bytes, &blob_path(dir, &digest)?)?)
        }
        None => Vec::new(),
    };
    Ok(ImageLayers {
        layers,
        env,
        manifest: manifest_bytes,
    })
}

/// Reads an unpacked `docker save` archive (`manifest.json`, `Layers`
/// paths relative to the archive root).
pub fn read_docker(dir: &Path, reference: Option<&str>) -> Result<ImageLayers, OciError> {
    let manifest_path = dir.join("manifest.json");
    let bytes = read_file(&manifest_path)?;
    let manifest = parse(&bytes, &manifest_path)?;
    let images = manifest
        .as_array()
        .ok_or_else(|| layout(&manifest_path, "expected a list of images"))?;
    let image = match reference {
        Some(r) => images.iter().find(|image| {
            image
                .get("RepoTags")
                .and_then(Value::as_array)
                .is_some_and(|tags| tags.iter().any(|t| t.as_str() == Some(r)))
        }),
        None if images.len() == 1 => images.first(),
        None => None,
    }
    .ok_or_else(|| match reference {
        Some(r) => layout(&manifest_path, &format!("no image tagged {r:?}")),
        None => layout(
            &manifest_path,
            "the archive holds several images; name one with a reference",
        ),
    })?;
    let relative = |value: &Value| -> Result<PathBuf, OciError> {
        let text = value
            .as_str()
            .ok_or_else(|| layout(&manifest_path, "a path is not a string"))?;
        confined(dir, text).ok_or_else(|| layout(&manifest_path, &format!("bad path {text:?}")))
    };
    let layers = image
        .get("Layers")
        .and_then(Value::as_array)
        .ok_or_else(|| layout(&manifest_path, "the image has no Layers"))?
        .iter()
        .map(relative)
        .collect::<Result<Vec<_>, _>>()?;
    let env = match image.get("Config") {
        Some(config) => {
            let path = relative(config)?;
            config_env(&parse(&read_file(&path)?, &path)?)
        }
        None => Vec::new(),
    };
    Ok(ImageLayers {
        layers,
        env,
        manifest: serde_json::to_vec(image).unwrap_or(bytes),
    })
}

/// The index entry to follow: by reference annotation, else the one
/// linux/amd64 (or platform-less) manifest.
fn choose(index: &Value, reference: Option<&str>) -> Option<Value> {
    let manifests = index.get("manifests")?.as_array()?;
    let matches_platform = |m: &&Value| match m.get("platform") {
        None => true,
        Some(p) => {
            p.get("os").and_then(Value::as_str) == Some("linux")
                && p.get("architecture").and_then(Value::as_str) == Some("amd64")
        }
    };
    match reference {
        Some(r) => manifests
            .iter()
            .filter(matches_platform)
            .find(|m| {
                m.pointer("/annotations/org.opencontainers.image.ref.name")
                    .and_then(Value::as_str)
                    == Some(r)
            })
            .cloned(),
        None => manifests.iter().find(matches_platform).cloned(),
    }
}

fn config_env(config: &Value) -> Vec<String> {
    config
        .pointer("/config/Env")
        .and_then(Value::as_array)
        .map(|env| {
            env.iter()
                .filter_map(Value::as_str)
                .filter(|e| e.contains('=') && !e.contains('\n'))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn media_type(document: &Value) -> Option<&str> {
    document.get("mediaType").and_then(Value::as_str)
}

fn digest_of(descriptor: &Value, dir: &Path) -> Result<String, OciError> {
    let digest = descriptor
        .get("digest")
        .and_then(Value::as_str)
        .ok_or_else(|| layout(dir, "a descriptor has no digest"))?;
    Ok(digest.to_owned())
}

/// `blobs/sha256/<hex>` for a `sha256:<hex>` digest.
fn blob_path(dir: &Path, digest: &str) -> Result<PathBuf, OciError> {
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| layout(dir, &format!("unsupported digest {digest:?} (sha256 only)")))?;
    Ok(dir.join("blobs").join("sha256").join(hex))
}

fn read_blob(dir: &Path, digest: &str) -> Result<Vec<u8>, OciError> {
    let bytes = read_file(&blob_path(dir, digest)?)?;
    check(digest, &hex(&Sha256::digest(&bytes)))?;
    Ok(bytes)
}

fn verify_blob(dir: &Path, digest: &str) -> Result<(), OciError> {
    let path = blob_path(dir, digest)?;
    let read_err = |source| OciError::Read {
        path: path.clone(),
        source,
    };
    let mut file = fs::File::open(&path).map_err(read_err)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).map_err(read_err)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    check(digest, &hex(&hasher.finalize()))
}

fn check(digest: &str, actual: &str) -> Result<(), OciError> {
    if digest.strip_prefix("sha256:") == Some(actual) {
        Ok(())
    } else {
        Err(OciError::Digest {
            digest: digest.to_owned(),
            actual: actual.to_owned(),
        })
    }
}

/// Lower-case hex of a byte string.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `dir/relative` if `relative` stays inside `dir` lexically.
fn confined(dir: &Path, relative: &str) -> Option<PathBuf> {
    let path = Path::new(relative);
    let ok = path.components().all(|c| {
        matches!(
            c,
            std::path::Component::Normal(_) | std::path::Component::CurDir
        )
    });
    ok.then(|| dir.join(path))
}

fn read_file(path: &Path) -> Result<Vec<u8>, OciError> {
    fs::read(path).map_err(|source| OciError::Read {
        path: path.to_owned(),
        source,
    })
}

fn read_json(path: &Path) -> Result<Value, OciError> {
    parse(&read_file(path)?, path)
}

fn parse(bytes: &[u8], path: &Path) -> Result<Value, OciError> {
    serde_json::from_slice(bytes).map_err(|source| OciError::Json {
        path: path.to_owned(),
        source,
    })
}

fn layout(path: &Path, detail: &str) -> OciError {
    OciError::Layout {
        path: path.to_owned(),
        detail: detail.to_owned(),
    }
}

/// Test helpers: writing small OCI layouts.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// Stores `bytes` as a blob and returns its descriptor.
    pub(crate) fn put_blob(dir: &Path, media_type: &str, bytes: &[u8]) -> Value {
        let hex = hex(&Sha256::digest(bytes));
        let blobs = dir.join("blobs/sha256");
        fs::create_dir_all(&blobs).unwrap();
        fs::write(blobs.join(&hex), bytes).unwrap();
        json!({"mediaType": media_type, "digest": format!("sha256:{hex}"), "size": bytes.len()})
    }

    /// Writes an OCI layout whose layers are the given layer files.
    pub(crate) fn write_layout(dir: &Path, layers: &[PathBuf], env: &[&str]) {
        fs::create_dir_all(dir).unwrap();
        fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
        let config = json!({
            "architecture": "amd64", "os": "linux",
            "config": {"Env": env},
            "rootfs": {"type": "layers", "diff_ids": []},
        });
        let config = put_blob(
            dir,
            "application/vnd.oci.image.config.v1+json",
            config.to_string().as_bytes(),
        );
        let layers: Vec<Value> = layers
            .iter()
            .map(|l| {
                put_blob(
                    dir,
                    "application/vnd.oci.image.layer.v1.tar+gzip",
                    &fs::read(l).unwrap(),
                )
            })
            .collect();
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config, "layers": layers,
        });
        let mut manifest = put_blob(
            dir,
            "application/vnd.oci.image.manifest.v1+json",
            manifest.to_string().as_bytes(),
        );
        manifest["annotations"] = json!({"org.opencontainers.image.ref.name": "latest"});
        manifest["platform"] = json!({"os": "linux", "architecture": "amd64"});
        let index = json!({"schemaVersion": 2, "manifests": [manifest]});
        fs::write(dir.join("index.json"), index.to_string()).unwrap();
    }

    #[test]
    fn layout_gives_layers_in_order_and_env() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        fs::write(&a, b"layer a").unwrap();
        fs::write(&b, b"layer b").unwrap();
        let oci = dir.path().join("oci");
        write_layout(&oci, &[a, b], &["PATH=/opt/bin:/usr/bin", "LANG=C.UTF-8"]);
        let image = read_any(&oci, None).unwrap();
        assert_eq!(image.layers.len(), 2);
        assert_eq!(fs::read(&image.layers[0]).unwrap(), b"layer a");
        assert_eq!(fs::read(&image.layers[1]).unwrap(), b"layer b");
        assert_eq!(image.env, vec!["PATH=/opt/bin:/usr/bin", "LANG=C.UTF-8"]);
        assert!(read_layout(&oci, Some("latest")).is_ok());
        assert!(read_layout(&oci, Some("other")).is_err());
    }

    #[test]
    fn corrupt_blobs_are_caught() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        fs::write(&a, b"layer a").unwrap();
        let oci = dir.path().join("oci");
        write_layout(&oci, &[a], &[]);
        let blob = hex(&Sha256::digest(b"layer a"));
        fs::write(oci.join("blobs/sha256").join(blob), b"tampered").unwrap();
        let err = read_layout(&oci, None).unwrap_err();
        assert!(matches!(err, OciError::Digest { .. }), "{err}");
    }

    #[test]
    fn docker_save_manifest_is_read() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("abc")).unwrap();
        fs::write(dir.path().join("abc/layer.tar"), b"x").unwrap();
        fs::write(
            dir.path().join("cfg.json"),
            r#"{"config":{"Env":["PATH=/bin"]}}"#,
        )
        .unwrap();
        fs::write(
            dir.path().join("manifest.json"),
            r#"[{"Config":"cfg.json","RepoTags":["t:1"],"Layers":["abc/layer.tar"]}]"#,
        )
        .unwrap();
        let image = read_any(dir.path(), None).unwrap();
        assert_eq!(image.layers, vec![dir.path().join("abc/layer.tar")]);
        assert_eq!(image.env, vec!["PATH=/bin"]);
        assert!(read_docker(dir.path(), Some("t:2")).is_err());

        fs::write(
            dir.path().join("manifest.json"),
            r#"[{"Config":"cfg.json","Layers":["../../etc/shadow"]}]"#,
        )
        .unwrap();
        assert!(read_docker(dir.path(), None).is_err());
    }
}
