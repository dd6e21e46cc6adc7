//! The image section of a create: `image` (a name in the server's image
//! store; "" for the default image) or `no_image` (the initramfs alone).

use std::path::PathBuf;

use tonic::Status;

use airlock::images::ImageStore;
use airlock_api::reason::{self, invalid};
use airlock_api::v1::ErrorReason;

use crate::validate;

/// The root image a create boots, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Its name ("" for none).
    pub name: String,
    /// Its file (`None` for none).
    pub path: Option<PathBuf>,
}

/// The image `name` (or none, with `no_image`) as `images` holds it;
/// `NOT_FOUND` for a name it lacks.
pub fn image(name: &str, no_image: bool, images: &ImageStore) -> Result<Image, Status> {
    if no_image {
        if !name.is_empty() {
            return Err(invalid("image", "no_image and an image exclude each other"));
        }
        return Ok(Image {
            name: String::new(),
            path: None,
        });
    }
    let name = match name {
        "" => airlock::images::DEFAULT_IMAGE,
        name => name,
    };
    validate::name("image", name)?;
    let found = images.resolve(name).map_err(|error| {
        reason::status(
            ErrorReason::NotFound,
            format!(
                "image: {}; ListImages lists the images (the owner builds them with \
                 airlock-rootfs image build)",
                airlock::error_chain(&error)
            ),
        )
    })?;
    Ok(Image {
        name: name.to_owned(),
        path: Some(found.path),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use airlock_api::reason::{field_of, reason_of};

    #[test]
    fn no_image_is_none_and_excludes_a_name() {
        let dir = tempfile::tempdir().unwrap();
        let images = ImageStore::at(dir.path());
        assert_eq!(
            image("", true, &images).unwrap(),
            Image {
                name: String::new(),
                path: None
            }
        );
        let refused = image("default", true, &images).unwrap_err();
        assert_eq!(field_of(&refused), Some("image"));
    }

    #[test]
    fn names_are_looked_up_in_the_given_store_only() {
        let dir = tempfile::tempdir().unwrap();
        let images = ImageStore::at(dir.path());
        // The default image is in the Airlock home's store, not this one.
        let missing = image("", false, &images).unwrap_err();
        assert_eq!(reason_of(&missing), Some(ErrorReason::NotFound));
        assert!(missing.message().starts_with("image: "), "{missing:?}");
        let refused = image("../etc", false, &images).unwrap_err();
        assert_eq!(field_of(&refused), Some("image"));
    }
}
