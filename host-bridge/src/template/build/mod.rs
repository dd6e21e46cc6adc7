//! Building a named template from a [`TemplateSpec`]: run its steps in
//! build VMs (each cached, see `cache`), pack the result into one root
//! image (`flatten`), boot it, run `START` until `READY` passes (`start`)
//! and save the running guest as the template's snapshot.
//!
//! - `cache`: the step cache and the keys of steps.
//! - `steps`: one step in a build VM.
//! - `flatten`: the built filesystem as a root image.
//! - `start`: `START` and `READY` in the VM that becomes the snapshot.
//!
//! Progress reaches the caller as [`BuildEvent`]s; a failure is a
//! [`BuildError`] and leaves no VM, no template and no working file.

mod cache;
mod flatten;
mod start;
mod steps;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::error::Error;
use crate::template::named::{NamedError, NamedMeta, NamedStore, NamedTemplate, StepRecord};
use crate::template::{Base, StepContext, TemplateSpec};
use crate::SandboxBuilder;
use airlock_gateway::policy::{NetRule, NetworkPolicy};
use airlock_gateway::NetworkOptions;

pub use cache::StepCache;
pub use start::{parse_start_ticks, START_TAG};

/// Where cached root images are kept in the named templates' directory.
const ROOTS_DIR: &str = ".roots";

/// Turns a base the library cannot make itself (`debian:SUITE`, an OCI
/// layout, a tarball) into a root image file; given the base and the
/// context directory. The CLI's builds them with `airlock-rootfs`.
pub type BaseResolver =
    Arc<dyn Fn(&Base, &Path) -> Result<PathBuf, BaseResolveError> + Send + Sync>;

/// Why a [`BaseResolver`] could not make a base's root image: the
/// embedder's own error, kept as the build error's source.
pub type BaseResolveError = Box<dyn std::error::Error + Send + Sync>;

/// Asked, with the complete build's directory, just before the build
/// becomes the template (and replaces an older one of its name): an
/// embedder's last word, such as a quota on what its templates take. Its
/// refusal ends the build with [`BuildError::Refused`], leaving any older
/// template of the name as it was.
pub type BeforeCommit = Arc<dyn Fn(&Path) -> Result<(), String> + Send + Sync>;

/// How to build.
#[derive(Clone)]
pub struct BuildOptions {
    /// The template's name.
    pub name: String,
    /// Where `COPY` and `ADD` read from.
    pub context_dir: PathBuf,
    /// Network rules for `RUN` steps, besides the spec's.
    pub allow_net: Vec<NetRule>,
    /// Whether `RUN` steps may reach the host itself (its loopback, its
    /// own addresses): denied unless set, and then a rule of the host's
    /// own addresses is refused ([`airlock_gateway::host`]).
    pub host_access: crate::HostAccess,
    /// How the host resolves the names `RUN` steps reach (default: the
    /// system's resolver).
    pub resolver: Option<Arc<dyn crate::Resolve>>,
    pub memory_mib: u32,
    pub vcpus: u32,
    /// The build VMs' and the template's kernel, initramfs, accelerator
    /// and state directory (its size, image and template settings are
    /// replaced).
    pub sandbox: SandboxBuilder,
    pub store: NamedStore,
    pub images: airlock_images::ImageStore,
    pub resolve_base: Option<BaseResolver>,
    pub before_commit: Option<BeforeCommit>,
}

impl std::fmt::Debug for BuildOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuildOptions")
            .field("name", &self.name)
            .field("context_dir", &self.context_dir)
            .finish_non_exhaustive()
    }
}

impl BuildOptions {
    /// Defaults: 512 MiB, 1 vCPU, the default stores and sandbox settings.
    pub fn new(name: impl Into<String>, context_dir: impl Into<PathBuf>) -> Self {
        BuildOptions {
            name: name.into(),
            context_dir: context_dir.into(),
            allow_net: Vec::new(),
            host_access: crate::HostAccess::Denied,
            resolver: None,
            memory_mib: 512,
            vcpus: 1,
            sandbox: SandboxBuilder::default(),
            store: NamedStore::open_default(),
            images: airlock_images::ImageStore::open_default(),
            resolve_base: None,
            before_commit: None,
        }
    }
}

/// Which output a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputStream {
    Stdout,
    Stderr,
}

/// What a build reports as it goes.
#[derive(Debug, Clone)]
pub enum BuildEvent {
    /// Step `number` of `total` begins, or was found in the cache.
    Step {
        number: usize,
        total: usize,
        line: Option<usize>,
        instruction: String,
        cached: bool,
    },
    /// Output of step `number`'s program.
    Output {
        number: usize,
        stream: OutputStream,
        data: Bytes,
    },
    /// A phase after the steps (packing, START, snapshot).
    Phase(String),
}

/// Why a build failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// `FROM` names an image the image store cannot give.
    #[error("FROM {name}: `airlock image ls` lists the images")]
    BaseImage {
        name: String,
        #[source]
        source: airlock_images::ImageStoreError,
    },
    /// `FROM` names an `.ext4` root image the context does not hold.
    #[error("FROM: no root image at {}", path.display())]
    NoRootImage { path: PathBuf },
    /// The embedder's [`BaseResolver`] failed.
    #[error("FROM {base}")]
    BaseResolve {
        base: String,
        #[source]
        source: BaseResolveError,
    },
    /// A base only a [`BaseResolver`] can make, and the embedder gave none.
    #[error(
        "FROM {base}: this embedder builds no images; build one with airlock-rootfs and name it"
    )]
    NoBaseResolver { base: String },
    #[error(
        "step {number}{} ({instruction}) failed with {status}; the last of its output:\n{tail}",
        line.map(|l| format!(" at line {l}")).unwrap_or_default()
    )]
    StepFailed {
        number: usize,
        line: Option<usize>,
        instruction: String,
        /// "exit code N" or "signal N".
        status: String,
        tail: String,
    },
    #[error("START: {0}")]
    Start(String),
    #[error("context file {path}: make it exist in the context directory")]
    Context {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("network rule: {0}")]
    Rule(String),
    #[error(transparent)]
    Named(#[from] NamedError),
    #[error("in a build VM")]
    Sandbox(#[source] Box<Error>),
    #[error("template build: i/o on {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The base image lacks a program the build itself runs in the VM.
    #[error(
        "the base image has no {program}, which the build runs in it: a template's base needs a \
         POSIX shell, coreutils, util-linux's umount and GNU tar (Debian's and Ubuntu's roots have \
         them; a busybox-only root does not)"
    )]
    MissingTool { program: String },
    #[error("{0}")]
    Host(String),
    /// [`BuildOptions::before_commit`] refused the result.
    #[error("{0}")]
    Refused(String),
}

impl From<Error> for BuildError {
    fn from(error: Error) -> Self {
        BuildError::Sandbox(Box::new(error))
    }
}

impl BuildError {
    /// An error of a program the build runs in the VM: a program the base
    /// image does not have is [`BuildError::MissingTool`].
    pub(crate) fn tool(program: &str) -> impl FnOnce(Error) -> BuildError + '_ {
        move |error| {
            if error.agent_code() == Some(tonic::Code::NotFound) {
                BuildError::MissingTool {
                    program: program.to_owned(),
                }
            } else {
                BuildError::from(error)
            }
        }
    }

    pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
        move |source| BuildError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// Builds `spec` as the named template `options.name`, reporting to
/// `progress`.
pub async fn build(
    spec: &TemplateSpec,
    options: &BuildOptions,
    mut progress: impl FnMut(BuildEvent) + Send,
) -> Result<NamedTemplate, BuildError> {
    let began = Instant::now();
    crate::template::named::check_name(&options.name)?;
    let base_image = resolve_base(spec.base(), options)?;
    progress(BuildEvent::Phase(format!(
        "FROM {} ({})",
        describe_base(spec.base()),
        base_image.display()
    )));
    let mut rules = options.allow_net.clone();
    for rule in spec.network_rules() {
        rules.push(
            rule.parse()
                .map_err(|e| BuildError::Rule(format!("{rule}: {e}")))?,
        );
    }
    let vm = steps::StepVm {
        base: options
            .sandbox
            .clone()
            .image(&base_image)
            .memory_mib(options.memory_mib)
            .vcpus(options.vcpus)
            .from_template(false),
        network: (!rules.is_empty()).then(|| {
            let network = NetworkOptions::new()
                .policy(NetworkPolicy::from_rules(rules))
                .host_access(options.host_access);
            match &options.resolver {
                Some(resolver) => network.resolver(Arc::clone(resolver)),
                None => network,
            }
        }),
        context_dir: options.context_dir.clone(),
    };
    let cache = StepCache::new(options.store.steps_dir());
    let mut key = cache::base_key(&base_image)?;
    let mut layer: Option<PathBuf> = None;
    let mut context = StepContext::default();
    let mut records = Vec::new();
    let total = spec.steps().len();
    for (index, step) in spec.steps().iter().enumerate() {
        let number = index + 1;
        key = cache::step_key(&key, step, &context, &options.context_dir)?;
        let instruction = step.kind.describe();
        let found = cache.find(&key);
        let cached = match step.kind.needs_vm() {
            true => found.is_some(),
            false => cache.known(&key),
        };
        progress(BuildEvent::Step {
            number,
            total,
            line: step.line,
            instruction: instruction.clone(),
            cached,
        });
        if step.kind.needs_vm() {
            layer = Some(match found {
                Some(disk) => disk,
                None => {
                    let work = cache.work(&key, layer.as_deref())?;
                    vm.run(number, step, &context, &work, &mut progress).await?;
                    cache.commit(work, &key, &instruction)?
                }
            });
        } else {
            cache.record(&key, &instruction)?;
        }
        context.apply(&step.kind);
        records.push(StepRecord {
            instruction,
            key: key.clone(),
        });
    }

    let rootfs = root_image(
        &cache,
        &vm,
        &key,
        layer.as_deref(),
        &base_image,
        options,
        &context,
        &mut progress,
    )
    .await?;
    let staged = options.store.stage(&options.name)?;
    let mut meta = NamedMeta {
        name: options.name.clone(),
        base: describe_base(spec.base()),
        rootfs,
        steps: records,
        memory_mib: options.memory_mib,
        vcpus: options.vcpus,
        env: context.env.clone(),
        workdir: context.workdir.clone(),
        user: context.user.clone(),
        start: spec
            .start_program()
            .map(|p| p.describe())
            .unwrap_or_default(),
        ready: spec.ready_check().map(|r| r.describe()).unwrap_or_default(),
        start_pid: None,
        start_ticks: None,
        built_unix_secs: 0,
        build_secs: 0.0,
    };
    let snapshot = options
        .sandbox
        .clone()
        .template(&staged.as_template(meta.clone()));
    if let Some(program) = spec.start_program() {
        progress(BuildEvent::Phase(format!("START {}", program.describe())));
        if let Some(ready) = spec.ready_check() {
            progress(BuildEvent::Phase(format!(
                "waiting for {}",
                ready.describe()
            )));
        }
    }
    progress(BuildEvent::Phase(
        "saving the running VM as the template".into(),
    ));
    let start = spec.start_program().cloned();
    let ready = spec.ready_check().cloned();
    let start_context = context.clone();
    let (_, started) = snapshot
        .snapshot_prepared(move |channel| async move {
            match start {
                Some(program) => {
                    start::start_and_wait(channel, &program, &start_context, ready.as_ref())
                        .await
                        .map(Some)
                }
                None => Ok(None),
            }
        })
        .await??;
    meta.start_pid = started.map(|s| s.pid);
    meta.start_ticks = started.and_then(|s| s.ticks);
    meta.built_unix_secs = airlock_images::now_unix();
    meta.build_secs = began.elapsed().as_secs_f64();
    if let Some(check) = &options.before_commit {
        check(staged.dir()).map_err(BuildError::Refused)?;
    }
    Ok(staged.commit(meta)?)
}

/// The root image of the built filesystem: cached by the last step's key.
#[allow(clippy::too_many_arguments)]
async fn root_image(
    cache: &StepCache,
    vm: &steps::StepVm,
    key: &str,
    layer: Option<&Path>,
    base_image: &Path,
    options: &BuildOptions,
    context: &StepContext,
    progress: &mut (impl FnMut(BuildEvent) + Send),
) -> Result<PathBuf, BuildError> {
    let Some(layer) = layer else {
        // Nothing changed the filesystem: the base is the root.
        return Ok(base_image.to_owned());
    };
    let roots = options.store.dir().join(ROOTS_DIR);
    std::fs::create_dir_all(&roots).map_err(BuildError::io(&roots))?;
    let target = roots.join(format!("{key}.ext4"));
    if target.is_file() {
        progress(BuildEvent::Phase("root image: cached".into()));
        return Ok(target);
    }
    progress(BuildEvent::Phase(
        "packing the filesystem into a root image".into(),
    ));
    let scratch = tempfile::Builder::new()
        .prefix(".flatten-")
        .tempdir_in(&roots)
        .map_err(BuildError::io(&roots))?;
    let work = cache.work(&format!("flatten-{key}"), Some(layer))?;
    let out = scratch.path().join("rootfs.ext4");
    vm.flatten(&work, context, scratch.path(), &out).await?;
    airlock_atomic_file::rename(&out, &target).map_err(BuildError::io(&target))?;
    Ok(target)
}

fn resolve_base(base: &Base, options: &BuildOptions) -> Result<PathBuf, BuildError> {
    match base {
        Base::Image(name) => options
            .images
            .resolve(name)
            .map(|info| info.path)
            .map_err(|source| BuildError::BaseImage {
                name: name.clone(),
                source,
            }),
        Base::Path(path) if path.extension().is_some_and(|e| e == "ext4") => {
            let path = options.context_dir.join(path);
            if path.is_file() {
                Ok(path)
            } else {
                Err(BuildError::NoRootImage { path })
            }
        }
        other => match &options.resolve_base {
            Some(resolve) => {
                resolve(other, &options.context_dir).map_err(|source| BuildError::BaseResolve {
                    base: describe_base(other),
                    source,
                })
            }
            None => Err(BuildError::NoBaseResolver {
                base: describe_base(other),
            }),
        },
    }
}

fn describe_base(base: &Base) -> String {
    match base {
        Base::Image(name) => name.clone(),
        Base::Debian(suite) => format!("debian:{suite}"),
        Base::Path(path) => path.display().to_string(),
    }
}

/// What `gc` keeps: every step and root of a named template that exists;
/// everything else in the caches is removed. Returns the bytes freed.
pub fn collect(store: &NamedStore) -> Result<u64, BuildError> {
    let mut keep = BTreeSet::new();
    let mut roots = BTreeSet::new();
    for template in store.list()?.into_iter().flatten() {
        keep.extend(template.meta().steps.iter().map(|s| s.key.clone()));
        roots.insert(template.rootfs_path());
    }
    store.collect_leftovers()?;
    let mut freed = StepCache::new(store.steps_dir()).collect(&keep)?;
    let dir = store.dir().join(ROOTS_DIR);
    if let Ok(read_dir) = std::fs::read_dir(&dir) {
        for entry in read_dir.flatten() {
            if !roots.contains(&entry.path()) {
                freed += crate::template::named::disk_usage_of(&entry.path());
                let removed = match entry.file_type() {
                    Ok(kind) if kind.is_dir() => std::fs::remove_dir_all(entry.path()),
                    _ => std::fs::remove_file(entry.path()),
                };
                removed.map_err(BuildError::io(&entry.path()))?;
            }
        }
    }
    Ok(freed)
}
