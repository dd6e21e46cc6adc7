//! Root filesystem images for sandboxes: ext4 files in the image store
//! (`airlock_images`), cached by a hash of their inputs.
//!
//! Data flow for [`build`]:
//! [`inputs`] (hash the [`Source`]: Debian suite, mirror and packages; a
//! directory tree; a tarball's bytes; a container manifest) -> store lookup
//! (a hit only re-points the name) -> a staging directory in the store ->
//! the root tree: [`debian`] (debootstrap), a directory as is, a tarball or
//! a container image's layers applied in order by [`layer`] (whiteouts
//! honoured; [`oci`] finds the layers of an OCI layout or `docker save`
//! archive) -> [`ext4`] (`mkfs.ext4 -d`) -> rename into the store, then the
//! name.
//!
//! A container image's `Env` goes to `/etc/airlock/env` in the image; the
//! agent gives it to the programs it starts (it is how such an image's
//! `PATH` reaches them).

pub mod account;
pub mod debian;
pub mod ext4;
pub mod finish;
pub mod inputs;
pub mod layer;
pub mod oci;

use std::path::{Path, PathBuf};
use std::time::Instant;

use airlock_images::{ImageInfo, ImageMeta, ImageStore, ImageStoreError};

pub use debian::DebianSpec;
use inputs::Inputs;

/// Where in the image a container image's environment is written: the
/// contract's `IMAGE_ENV`, relative to the image's root.
pub fn env_file() -> &'static str {
    airlock_proto::contract::paths::IMAGE_ENV.trim_start_matches('/')
}
/// Headroom beyond the content, unless configured: the image is mounted
/// read-only, so this only has to cover what the estimate misses.
pub const DEFAULT_HEADROOM_MIB: u64 = 32;

/// Anything that stops an image build.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// A file or directory could not be read or written.
    #[error("cannot {action} {path}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An external tool (debootstrap, mkfs.ext4) failed or is missing.
    #[error("{program} failed: {detail}")]
    Tool {
        /// The tool.
        program: PathBuf,
        /// What it said.
        detail: String,
    },
    /// The disk the image is written to has too little free space.
    #[error(
        "not enough free disk space in {}: the image needs about {needed_mib} MiB, \
         {free_mib} MiB are free",
        dir.display()
    )]
    DiskFull {
        /// The directory the image goes to.
        dir: PathBuf,
        /// About how much the image's content takes.
        needed_mib: u64,
        /// What the filesystem has free for this user.
        free_mib: u64,
    },
    /// A layer or tarball could not be applied.
    #[error(transparent)]
    Layer(#[from] layer::LayerError),
    /// A container image could not be read.
    #[error(transparent)]
    Oci(#[from] oci::OciError),
    /// The image store refused.
    #[error(transparent)]
    Store(#[from] ImageStoreError),
}

/// Where an image's root tree comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// debootstrap minbase plus packages.
    Debian(DebianSpec),
    /// A directory, used as it is.
    Dir(PathBuf),
    /// A tarball of a root tree (plain, gzip or zstd).
    Tar(PathBuf),
    /// A container image: an OCI layout directory, or a `docker save` tar;
    /// `reference` picks one image when there are several.
    Container {
        /// The layout directory or archive file.
        path: PathBuf,
        /// A tag (`org.opencontainers.image.ref.name`, or a docker RepoTag).
        reference: Option<String>,
    },
}

impl Source {
    /// For people, and for `airlock image ls`.
    pub fn describe(&self) -> String {
        match self {
            Source::Debian(spec) => spec.describe(),
            Source::Dir(path) => format!("dir {}", path.display()),
            Source::Tar(path) => format!("tar {}", path.display()),
            Source::Container { path, reference } => match reference {
                Some(r) => format!("container {}:{r}", path.display()),
                None => format!("container {}", path.display()),
            },
        }
    }
}

/// What to build and where to put it.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// The root tree's source.
    pub source: Source,
    /// The name to point at the image (e.g. `default`).
    pub name: Option<String>,
    /// The store to build into.
    pub store: ImageStore,
    /// Free space beyond the content, in bytes.
    pub headroom: u64,
    /// Build even when the store has an image of these inputs.
    pub rebuild: bool,
}

impl BuildOptions {
    /// Options for `source` into the default store, no name.
    pub fn new(source: Source) -> Self {
        Self {
            source,
            name: None,
            store: ImageStore::open_default(),
            headroom: DEFAULT_HEADROOM_MIB << 20,
            rebuild: false,
        }
    }
}

/// A built (or found) image.
#[derive(Debug, Clone)]
pub struct Built {
    /// The image in the store.
    pub info: ImageInfo,
    /// Whether it was already there.
    pub cached: bool,
}

/// Numbered progress lines on the tracing log.
#[derive(Debug)]
struct Progress {
    step: usize,
    total: usize,
}

impl Progress {
    fn step(&mut self, what: &str) {
        self.step += 1;
        tracing::info!("[{}/{}] {what}", self.step, self.total);
    }
}

/// Builds the image described by `options`, or finds it in the store.
#[tracing::instrument(skip_all, fields(source = %options.source.describe()))]
pub fn build(options: &BuildOptions) -> Result<Built, ImageError> {
    let began = Instant::now();
    let store = &options.store;
    let id = image_id(options)?;
    if !options.rebuild {
        if let Some(info) = store.get(&id)? {
            let info = tag(store, options.name.as_deref(), info)?;
            tracing::info!(id, "image is cached");
            return Ok(Built { info, cached: true });
        }
    }
    let mut progress = Progress {
        step: 0,
        total: match &options.source {
            Source::Dir(_) => 1,
            _ => 2,
        },
    };
    let staged = store.staging()?;
    let tree = staged.path().join("rootfs");
    let source_tree = match &options.source {
        Source::Dir(dir) => dir.clone(),
        Source::Debian(spec) => {
            progress.step(&format!(
                "debootstrap {} (minbase) + {} from {}",
                spec.suite,
                spec.packages.join(","),
                spec.mirror
            ));
            create_root(&tree)?;
            debian::bootstrap(spec, &tree)?;
            finish::debian(&tree)?;
            tree.clone()
        }
        Source::Tar(file) => {
            progress.step(&format!("unpacking {}", file.display()));
            create_root(&tree)?;
            let stats = layer::apply(&tree, file)?;
            tracing::info!(entries = stats.entries, bytes = stats.bytes, "unpacked");
            tree.clone()
        }
        Source::Container { path, reference } => {
            progress.step(&format!("applying the layers of {}", path.display()));
            create_root(&tree)?;
            apply_container(path, reference.as_deref(), staged.path(), &tree)?;
            tree.clone()
        }
    };

    progress.step("mkfs.ext4");
    let image_path = staged.path().join(airlock_images::IMAGE_FILE);
    let image = ext4::make(&source_tree, &image_path, options.headroom)?;
    tracing::info!(
        content_bytes = image.tree.content_bytes,
        files = image.tree.inodes,
        image_bytes = image.image_bytes,
        "image written"
    );
    if tree.exists() {
        std::fs::remove_dir_all(&tree).map_err(|source| ImageError::Io {
            action: "remove",
            path: tree.clone(),
            source,
        })?;
    }
    let meta = ImageMeta {
        id,
        source: options.source.describe(),
        content_bytes: image.tree.content_bytes,
        image_bytes: image.image_bytes,
        created_unix: airlock_images::now_unix(),
        build_seconds: began.elapsed().as_secs_f64(),
    };
    let info = store.commit(staged, &image_path, &meta)?;
    let info = tag(store, options.name.as_deref(), info)?;
    Ok(Built {
        info,
        cached: false,
    })
}

/// The id of the image `options` would build.
pub fn image_id(options: &BuildOptions) -> Result<String, ImageError> {
    let mut inputs = Inputs::new();
    inputs.field("headroom", &options.headroom.to_string());
    match &options.source {
        Source::Debian(spec) => {
            inputs
                .field("source", "debian")
                .field("suite", &spec.suite)
                .field("mirror", &spec.mirror)
                .field("packages", &spec.packages.join(","))
                .field(
                    "account",
                    &format!("{}:{}:{}", account::NAME, account::ID, account::HOME),
                )
                .field("hosts", finish::HOSTS)
                .field("pip", "system-wide");
        }
        Source::Dir(dir) => {
            inputs.field("source", "dir").tree(dir).map_err(read(dir))?;
        }
        Source::Tar(file) => {
            inputs
                .field("source", "tar")
                .file(file)
                .map_err(read(file))?;
        }
        Source::Container { path, reference } => {
            inputs
                .field("source", "container")
                .field("reference", reference.as_deref().unwrap_or(""));
            if path.is_dir() {
                // The manifest names every layer and the config by digest.
                let image = oci::read_any(path, reference.as_deref())?;
                inputs.field("manifest", &String::from_utf8_lossy(&image.manifest));
            } else {
                inputs.file(path).map_err(read(path))?;
            }
        }
    }
    Ok(inputs.id())
}

fn read(path: &Path) -> impl FnOnce(std::io::Error) -> ImageError + '_ {
    move |source| ImageError::Io {
        action: "read",
        path: path.to_owned(),
        source,
    }
}

fn tag(store: &ImageStore, name: Option<&str>, info: ImageInfo) -> Result<ImageInfo, ImageError> {
    match name {
        Some(name) => {
            store.tag(name, &info.meta.id)?;
            Ok(store.get(&info.meta.id)?.unwrap_or(info))
        }
        None => Ok(info),
    }
}

/// The root of a new tree: mode 0755, whatever the staging directory's.
fn create_root(tree: &Path) -> Result<(), ImageError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(tree)
        .map_err(|source| ImageError::Io {
            action: "create",
            path: tree.to_owned(),
            source,
        })
}

/// Applies a container image's layers onto `tree` and records its `Env`.
fn apply_container(
    path: &Path,
    reference: Option<&str>,
    scratch: &Path,
    tree: &Path,
) -> Result<(), ImageError> {
    let layout = if path.is_dir() {
        path.to_owned()
    } else {
        // A `docker save` (or OCI) archive: unpack it beside the tree.
        let dir = scratch.join("archive");
        std::fs::create_dir_all(&dir).map_err(|source| ImageError::Io {
            action: "create",
            path: dir.clone(),
            source,
        })?;
        let unpack =
            || -> std::io::Result<()> { tar::Archive::new(layer::open(path)?).unpack(&dir) };
        unpack().map_err(|source| ImageError::Io {
            action: "unpack",
            path: path.to_owned(),
            source,
        })?;
        dir
    };
    let image = oci::read_any(&layout, reference)?;
    let count = image.layers.len();
    for (i, layer_file) in image.layers.iter().enumerate() {
        let stats = layer::apply(tree, layer_file)?;
        tracing::info!(
            layer = format!("{}/{count}", i + 1),
            entries = stats.entries,
            bytes = stats.bytes,
            whiteouts = stats.whiteouts,
            "layer applied"
        );
    }
    if !image.env.is_empty() {
        let env_file = tree.join(env_file());
        let write = || -> std::io::Result<()> {
            if let Some(parent) = env_file.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&env_file, image.env.join("\n") + "\n")
        };
        write().map_err(|source| ImageError::Io {
            action: "write",
            path: env_file.clone(),
            source,
        })?;
    }
    if path.is_file() {
        let _ = std::fs::remove_dir_all(scratch.join("archive"));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::fs;

    fn options(store: &Path, source: Source) -> BuildOptions {
        BuildOptions {
            name: Some("t".into()),
            store: ImageStore::at(store),
            headroom: 0,
            ..BuildOptions::new(source)
        }
    }

    #[test]
    fn a_directory_builds_once_then_comes_from_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir_all(root.join("bin")).unwrap();
        fs::write(root.join("bin/hello"), "#!/bin/sh\necho hi\n").unwrap();
        let opts = options(&dir.path().join("store"), Source::Dir(root.clone()));

        let first = build(&opts).unwrap();
        assert!(!first.cached);
        assert_eq!(first.info.names, vec!["t".to_owned()]);
        assert!(first.info.path.is_file());
        let second = build(&opts).unwrap();
        assert!(second.cached);
        assert_eq!(second.info.meta.id, first.info.meta.id);

        fs::write(root.join("bin/hello"), "#!/bin/sh\necho changed\n").unwrap();
        let third = build(&opts).unwrap();
        assert!(!third.cached);
        assert_ne!(third.info.meta.id, first.info.meta.id);
        // The name follows the newest build.
        assert_eq!(opts.store.resolve("t").unwrap().meta.id, third.info.meta.id);
    }

    #[test]
    fn a_container_layout_builds_with_whiteouts_and_env() {
        let dir = tempfile::tempdir().unwrap();
        let lower = dir.path().join("lower.tar");
        let upper = dir.path().join("upper.tar.gz");
        layer::tests::write_layer(
            &lower,
            &[("etc", None), ("etc/a", Some("a")), ("etc/b", Some("b"))],
            false,
        );
        layer::tests::write_layer(&upper, &[("etc/.wh.b", Some(""))], true);
        let oci_dir = dir.path().join("oci");
        oci::tests::write_layout(&oci_dir, &[lower, upper], &["PATH=/opt/bin:/bin"]);
        let source = Source::Container {
            path: oci_dir,
            reference: None,
        };
        let opts = options(&dir.path().join("store"), source);
        let id = image_id(&opts).unwrap();
        let built = build(&opts).unwrap();
        assert_eq!(built.info.meta.id, id);
        assert!(built.info.meta.source.starts_with("container "));
        // debugfs reads the image without mounting it.
        let listing = debugfs(&built.info.path, "ls -l /etc");
        let names: Vec<&str> = listing
            .lines()
            .filter_map(|line| line.split_whitespace().last())
            .collect();
        assert!(names.contains(&"a"), "{listing}");
        assert!(!names.contains(&"b"), "{listing}");
        assert!(!listing.contains(".wh."), "{listing}");
        let env = debugfs(&built.info.path, "cat /etc/airlock/env");
        assert_eq!(env.trim(), "PATH=/opt/bin:/bin");
    }

    #[test]
    fn a_docker_save_archive_builds() {
        let dir = tempfile::tempdir().unwrap();
        let layer_file = dir.path().join("layer.tar");
        layer::tests::write_layer(
            &layer_file,
            &[("etc", None), ("etc/from-docker", Some("d"))],
            false,
        );
        let archive = dir.path().join("image.tar");
        let mut outer = tar::Builder::new(fs::File::create(&archive).unwrap());
        let mut add = |name: &str, bytes: &[u8]| {
            let mut header = tar::Header::new_gnu();
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            header.set_mtime(1_700_000_000);
            header.set_entry_type(tar::EntryType::Regular);
            outer.append_data(&mut header, name, bytes).unwrap();
        };
        add("abc/layer.tar", &fs::read(&layer_file).unwrap());
        add("cfg.json", br#"{"config":{"Env":["PATH=/usr/bin:/bin"]}}"#);
        add(
            "manifest.json",
            br#"[{"Config":"cfg.json","RepoTags":["t:1"],"Layers":["abc/layer.tar"]}]"#,
        );
        outer.into_inner().unwrap();

        let source = Source::Container {
            path: archive,
            reference: Some("t:1".into()),
        };
        let built = build(&options(&dir.path().join("store"), source)).unwrap();
        assert_eq!(debugfs(&built.info.path, "cat /etc/from-docker"), "d");
        assert_eq!(
            debugfs(&built.info.path, "cat /etc/airlock/env").trim(),
            "PATH=/usr/bin:/bin"
        );
    }

    fn debugfs(image: &Path, request: &str) -> String {
        let out = std::process::Command::new(debian::find_program("debugfs"))
            .args(["-R", request])
            .arg(image)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}
