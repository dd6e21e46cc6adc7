//! The stores a create request is checked against (`api_create`,
//! `e2b_create`): a data directory, an image store holding one image
//! (`default`) and an empty store of named templates, made once per process.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use airlock::images::{ImageMeta, ImageStore};
use airlock::template::NamedStore;
use airlock_server::fuzzing::Context;

/// The lifetime a create without one gets.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);

/// The stores, made once.
pub struct Fixture {
    _dir: tempfile::TempDir,
    pub data_dir: PathBuf,
    pub images: ImageStore,
    pub templates: NamedStore,
}

impl Fixture {
    /// The server's create context over the stores.
    pub fn context(&self) -> Context<'_> {
        Context {
            images: &self.images,
            templates: &self.templates,
            data_dir: &self.data_dir,
            default_timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// The process's stores.
pub fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let images = ImageStore::at(dir.path().join("images"));
        let id = "0123456789abcdef";
        let image_dir = images.root().join(id);
        std::fs::create_dir_all(&image_dir).expect("the image's directory");
        std::fs::write(image_dir.join(airlock::images::IMAGE_FILE), b"")
            .expect("the image file");
        let meta = ImageMeta {
            id: id.to_owned(),
            source: "fuzz".to_owned(),
            content_bytes: 0,
            image_bytes: 0,
            created_unix: 0,
            build_seconds: 0.0,
        };
        std::fs::write(
            image_dir.join(airlock::images::META_FILE),
            serde_json::to_vec(&meta).expect("json"),
        )
        .expect("the image's metadata");
        images.tag("default", id).expect("the name default");
        Fixture {
            data_dir: dir.path().join("data"),
            images,
            templates: NamedStore::new(dir.path().join("templates")),
            _dir: dir,
        }
    })
}
