//! Where Airlock's guest artifacts live, shared by the host library
//! (`airlock`, which boots them) and the builder (`airlock-rootfs`, which
//! writes them), with no RPC or VMM dependency.
//!
//! - [`artifacts`]: the Airlock home directory and the default kernel and
//!   initramfs in it.
//! - The image store ([`ImageStore`]): root filesystem images under
//!   `<home>/images`, cached by a hash of their inputs. Builders stage an
//!   image in the store's `tmp/` and commit it with a rename; readers
//!   resolve a name or an id to an [`ImageInfo`].
//!
//! The host library re-exports this crate as `airlock::images` and its
//! [`artifacts`] module as `airlock::artifacts`.

#![forbid(unsafe_code)]

pub mod artifacts;
mod store;

pub use store::{
    is_id, now_unix, ImageInfo, ImageMeta, ImageStore, ImageStoreError, Removed, DEFAULT_IMAGE,
    ID_LEN, IMAGE_FILE, META_FILE,
};
