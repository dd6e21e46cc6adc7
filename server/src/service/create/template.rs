//! The template section of a create: `template`, a named template (what
//! `airlock template build` makes) in the server's store. A template brings
//! its own root image and size: a create naming one leaves the image and
//! the workspace unset, and its memory and vCPUs unset or equal.

use tonic::Status;

use airlock::template::{NamedError, NamedStore, NamedTemplate};
use airlock_api::reason::{self, invalid};
use airlock_api::v1::{self as api, ErrorReason};

use crate::validate;

/// The named template `request` starts from, if it names one, as
/// `templates` holds it; `NOT_FOUND` for a name it lacks.
pub fn template(
    request: &api::CreateSandboxRequest,
    templates: &NamedStore,
) -> Result<Option<NamedTemplate>, Status> {
    let name = match request.template.as_str() {
        "" => return Ok(None),
        name => name,
    };
    validate::name("template", name)?;
    let template = templates.get(name).map_err(|error| {
        let reason = match error {
            NamedError::NotFound(_) => ErrorReason::NotFound,
            _ => ErrorReason::Internal,
        };
        reason::status(
            reason,
            format!(
                "template: {}; ListTemplates lists them",
                airlock::error_chain(&error)
            ),
        )
    })?;
    let meta = template.meta();
    if request.memory_mib != 0 && request.memory_mib != meta.memory_mib
        || request.vcpus != 0 && request.vcpus != meta.vcpus
    {
        return Err(invalid(
            "template",
            format!(
                "template {} was built for {} MiB and {} vCPUs; leave memory_mib and \
                 vcpus unset or equal",
                meta.name, meta.memory_mib, meta.vcpus
            ),
        ));
    }
    if request.no_image || !request.image.is_empty() || !request.workspace.is_empty() {
        return Err(invalid(
            "template",
            "a template brings its own root image; leave image, no_image and workspace unset",
        ));
    }
    Ok(Some(template))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(super) mod tests {
    use super::*;
    use airlock::template::NamedMeta;
    use airlock_api::reason::{field_of, reason_of};

    /// Puts a template `name` of 256 MiB and 1 vCPU into `templates`.
    pub fn put(templates: &NamedStore, name: &str) {
        let dir = templates.dir().join(name);
        std::fs::create_dir_all(dir.join("snapshot")).unwrap();
        std::fs::write(dir.join("root.ext4"), b"").unwrap();
        let meta = NamedMeta {
            name: name.to_owned(),
            base: "default".to_owned(),
            rootfs: dir.join("root.ext4"),
            steps: Vec::new(),
            memory_mib: 256,
            vcpus: 1,
            env: Vec::new(),
            workdir: None,
            user: None,
            start: String::new(),
            ready: String::new(),
            start_pid: None,
            start_ticks: None,
            built_unix_secs: 0,
            build_secs: 0.0,
        };
        std::fs::write(
            dir.join("template.json"),
            serde_json::to_vec(&meta).unwrap(),
        )
        .unwrap();
    }

    fn named(name: &str) -> api::CreateSandboxRequest {
        api::CreateSandboxRequest {
            template: name.to_owned(),
            ..api::CreateSandboxRequest::default()
        }
    }

    #[test]
    fn a_template_is_found_in_the_given_store_only() {
        let dir = tempfile::tempdir().unwrap();
        let templates = NamedStore::new(dir.path().join("templates"));
        assert_eq!(template(&named(""), &templates).unwrap(), None);
        let missing = template(&named("web"), &templates).unwrap_err();
        assert_eq!(reason_of(&missing), Some(ErrorReason::NotFound));
        assert!(
            missing.message().contains("no template named web"),
            "{missing:?}"
        );
        put(&templates, "web");
        let found = template(&named("web"), &templates).unwrap().unwrap();
        assert_eq!(found.meta().name, "web");
    }

    #[test]
    fn a_template_refuses_another_size_or_root() {
        let dir = tempfile::tempdir().unwrap();
        let templates = NamedStore::new(dir.path());
        put(&templates, "web");
        let bigger = api::CreateSandboxRequest {
            memory_mib: 512,
            ..named("web")
        };
        let refused = template(&bigger, &templates).unwrap_err();
        assert_eq!(field_of(&refused), Some("template"));
        assert!(
            refused.message().contains("was built for 256 MiB"),
            "{refused:?}"
        );
        let same = api::CreateSandboxRequest {
            memory_mib: 256,
            vcpus: 1,
            ..named("web")
        };
        assert!(template(&same, &templates).is_ok());
        let with_image = api::CreateSandboxRequest {
            image: "default".to_owned(),
            ..named("web")
        };
        let refused = template(&with_image, &templates).unwrap_err();
        assert!(
            refused.message().contains("its own root image"),
            "{refused:?}"
        );
        let refused = template(&named("a b"), &templates).unwrap_err();
        assert_eq!(field_of(&refused), Some("template"));
    }
}
