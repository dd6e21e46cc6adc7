//! What the fuzz targets in `fuzz/` drive: the checks a stranger's create
//! request meets before anything boots, and the stores they look names up
//! in. Behind the `fuzzing` feature; not a stable API.

pub use crate::e2b::fuzzing as e2b;
pub use crate::machine::Machine;
pub use crate::service::create::{check, workspace_dir, Context, Create};
pub use crate::snapshots::{Named, SnapshotNames};
pub use crate::templates::Templates;
