//! Root images that tests build on first use into the default image store
//! and find there afterwards by the hash of their inputs.

use std::path::PathBuf;

use airlock_rootfs::image::{self, BuildOptions, DebianSpec, Source};

/// The name of the image with Debian's python3-matplotlib.
pub const MATPLOTLIB_IMAGE: &str = "test-matplotlib";

/// The default packages plus python3-matplotlib, named [`MATPLOTLIB_IMAGE`]
/// in the default store (cached: a rerun takes milliseconds; the first
/// build needs debootstrap, root and Debian's mirror, as scripts/setup's
/// default image does). Blocks while it builds.
pub fn matplotlib_image() -> PathBuf {
    let spec = DebianSpec::new(
        image::debian::DEFAULT_SUITE,
        image::debian::DEFAULT_MIRROR,
        &["python3-matplotlib".to_owned()],
    );
    let options = BuildOptions {
        name: Some(MATPLOTLIB_IMAGE.into()),
        ..BuildOptions::new(Source::Debian(spec))
    };
    match image::build(&options) {
        Ok(built) => built.info.path,
        Err(error) => panic!(
            "cannot build the matplotlib image: {}",
            airlock::error_chain(&error)
        ),
    }
}
