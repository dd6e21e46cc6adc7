//! Templates: booted guests saved once and cloned on every later start.
//!
//! The first start of a configuration boots a VM whose RAM is a shared file,
//! waits for its agent, disconnects, and saves QEMU's device state beside the
//! file (see `vmm::snapshot`). Every later start of the same configuration
//! maps that file copy on write and loads the state: the guest continues
//! where the template stopped, with the agent already serving, and gets its
//! own entropy, clock, hostname and id from the host before anything runs
//! (`System.Personalize`).
//!
//! - `key`: [`TemplateInputs`], everything a template depends on, and the
//!   key it is cached by.
//! - `store`: [`TemplateStore`], the cache directory: finding and checking
//!   templates, the per-key build lock, atomic commits, listing, removal and
//!   garbage collection.
//! - [`named`]: named templates on disk ([`NamedTemplate`], [`NamedStore`]).
//! - [`mod@build`]: building a named template from a spec: steps in build VMs,
//!   each cached; the root image; `START`, `READY` and the snapshot.
//! - `spec`: [`TemplateSpec`], a named template's recipe, read from the
//!   Dockerfile subset or built in code.
//!
//! Starting from a template is `sandbox::clone`.

pub mod build;
mod key;
pub mod named;
mod spec;
mod store;

use std::path::PathBuf;

pub use build::{build, BuildError, BuildEvent, BuildOptions};
pub use key::{FileId, TemplateInputs, TEMPLATE_FORMAT};
pub use named::{NamedError, NamedMeta, NamedStore, NamedTemplate};
pub use spec::{
    Base, CopyStep, ParseError, Program, Ready, ReadyCheck, Step, StepContext, StepKind,
    TemplateSpec, DEFAULT_READY_TIMEOUT,
};
pub use store::{
    Building, KeyLock, Template, TemplateEntry, TemplateError, TemplateGc, TemplateMeta,
    TemplateStore,
};

/// Overrides where templates are kept.
pub const TEMPLATE_DIR_ENV: &str = "AIRLOCK_TEMPLATE_DIR";

/// Where templates are kept unless the builder says otherwise:
/// `$AIRLOCK_TEMPLATE_DIR`, else `templates/` in the artifact home (beside
/// the kernel and images they are made from).
pub fn default_dir() -> PathBuf {
    match std::env::var_os(TEMPLATE_DIR_ENV) {
        Some(dir) => PathBuf::from(dir),
        None => crate::artifacts::home().join("templates"),
    }
}
