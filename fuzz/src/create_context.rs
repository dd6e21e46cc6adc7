//! The stores a create request is checked against (`api_create`,
//! `e2b_create`): a data directory, an image store holding one image
//! (`default`), empty stores of named templates (the server's and the
//! keys'), and the server's named snapshots holding one, named
//! [`SNAPSHOT`] by the key [`KEY`] and by the owner; made once per process.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use airlock::images::{ImageMeta, ImageStore};
use airlock::saved::{SavedDisk, SavedVm};
use airlock::snapshot::{SnapshotMeta, SNAPSHOT_META_FORMAT};
use airlock_server::fuzzing::{Context, Named, SnapshotNames, Templates};
use airlock_server::keys::OWNER_NAME;

/// The lifetime a create without one gets.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);

/// The API key the targets check requests as.
pub const KEY: &str = "fuzz";

/// The snapshot the key and the owner both have.
pub const SNAPSHOT: &str = "web";

/// Its size, which a create naming it may repeat but not change.
pub const SNAPSHOT_MEMORY_MIB: u32 = 512;
pub const SNAPSHOT_VCPUS: u32 = 2;

/// The stores, made once.
pub struct Fixture {
    _dir: tempfile::TempDir,
    pub data_dir: PathBuf,
    pub images: ImageStore,
    pub templates: Templates,
    pub snapshots: SnapshotNames,
}

impl Fixture {
    /// The server's create context over the stores.
    pub fn context(&self) -> Context<'_> {
        Context {
            images: &self.images,
            templates: &self.templates,
            snapshots: &self.snapshots,
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
        std::fs::write(image_dir.join(airlock::images::IMAGE_FILE), b"").expect("the image file");
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
        let data_dir = dir.path().join("data");
        let snapshots = SnapshotNames::new(&data_dir);
        add_snapshot(&data_dir, &snapshots);
        let templates = Templates::new(dir.path().join("templates"), &data_dir, 1);
        Fixture {
            data_dir,
            images,
            templates,
            snapshots,
            _dir: dir,
        }
    })
}

/// Writes a snapshot into the object store, as a taken one's `meta.json`
/// (its saved stream is never read by the checks), and names it
/// [`SNAPSHOT`] for [`KEY`] and for the owner, as the server's names are
/// laid out (`<data dir>/snapshots/names/KEY/NAME.json`).
fn add_snapshot(data_dir: &Path, snapshots: &SnapshotNames) {
    let id = "ab".repeat(32);
    let object = snapshots.objects().dir().join(&id);
    std::fs::create_dir_all(&object).expect("the snapshot's directory");
    let meta = SnapshotMeta {
        format: SNAPSHOT_META_FORMAT,
        id: id.clone(),
        vm: SavedVm {
            accel: "tcg".to_owned(),
            cpu: Some("max".to_owned()),
            memory_mib: SNAPSHOT_MEMORY_MIB,
            vcpus: SNAPSHOT_VCPUS,
            kernel: "/var/cache/airlock/kernel/vmlinuz".into(),
            initramfs: "/var/cache/airlock/initramfs.cpio".into(),
            kernel_cmdline: "console=ttyS0".to_owned(),
            disks: vec![SavedDisk {
                id: "root".to_owned(),
                path: object.join("root.ext4"),
                read_only: true,
            }],
            serial_ports: Vec::new(),
        },
        qemu_version: "7.2.22".to_owned(),
        agent_version: "0.1.0".to_owned(),
        protocol_revision: 7,
        source: "sandbox-fuzz".to_owned(),
        parent: None,
        user: None,
        cwd: None,
        env: Vec::new(),
        created_unix_ms: 1,
        paused_ms: 1,
        stream_bytes: 0,
    };
    std::fs::write(
        object.join("meta.json"),
        serde_json::to_vec(&meta).expect("json"),
    )
    .expect("the snapshot's metadata");
    let named = Named {
        name: SNAPSHOT.to_owned(),
        id,
        source_sandbox_id: "sandbox-fuzz".to_owned(),
        image: "default".to_owned(),
        template: String::new(),
        parent_snapshot: String::new(),
        memory_mib: SNAPSHOT_MEMORY_MIB,
        vcpus: SNAPSHOT_VCPUS,
        created_at_ms: 1,
        paused_ms: 1,
        took_ms: 1,
    };
    for whose in [KEY, OWNER_NAME] {
        let names = data_dir.join("snapshots").join("names").join(whose);
        std::fs::create_dir_all(&names).expect("the snapshot names' directory");
        std::fs::write(
            names.join(format!("{SNAPSHOT}.json")),
            serde_json::to_vec(&named).expect("json"),
        )
        .expect("the snapshot's name");
    }
}
