//! The template section of a create: `template`, a named template: the
//! caller's own (built through `Templates.Build`) first, else the server's
//! (what `airlock template build` makes on its host). A template brings
//! its own root image and size: a create naming one leaves the image and
//! the workspace unset, and its memory and vCPUs unset or equal.

use tonic::Status;

use airlock::template::NamedTemplate;
use airlock_api::reason::invalid;
use airlock_api::v1 as api;

use crate::principal::Principal;
use crate::templates::Templates;
use crate::validate;

/// The named template `request` starts from, if it names one, as
/// `principal` finds it in `templates`; `NOT_FOUND` for a name it cannot
/// see.
pub fn template(
    request: &api::CreateSandboxRequest,
    principal: &Principal,
    templates: &Templates,
) -> Result<Option<NamedTemplate>, Status> {
    let name = match request.template.as_str() {
        "" => return Ok(None),
        name => name,
    };
    validate::name("template", name)?;
    let template = templates.resolve(principal, name)?.template;
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
    use airlock_api::reason::{field_of, reason_of};
    use airlock_api::v1::ErrorReason;
    use std::sync::Arc;

    /// Puts a template `name` of 256 MiB and 1 vCPU into `store`.
    pub fn put(store: &airlock::template::NamedStore, name: &str) {
        crate::templates::tests::put(store, name, 0);
    }

    fn stores(dir: &std::path::Path) -> Templates {
        Templates::new(dir.join("templates"), dir, 1)
    }

    fn named(name: &str) -> api::CreateSandboxRequest {
        api::CreateSandboxRequest {
            template: name.to_owned(),
            ..api::CreateSandboxRequest::default()
        }
    }

    #[test]
    fn a_keys_own_template_comes_first_and_anothers_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let templates = stores(dir.path());
        let owner = Principal::Owner;
        let alice = Principal::Key(Arc::from("alice"));
        let bob = Principal::Key(Arc::from("bob"));
        assert_eq!(template(&named(""), &owner, &templates).unwrap(), None);
        let missing = template(&named("web"), &alice, &templates).unwrap_err();
        assert_eq!(reason_of(&missing), Some(ErrorReason::NotFound));
        assert!(
            missing.message().contains("no template named web"),
            "{missing:?}"
        );
        put(templates.server(), "web");
        put(&templates.store(&alice), "web");
        put(&templates.store(&alice), "mine");
        let found = template(&named("web"), &alice, &templates)
            .unwrap()
            .unwrap();
        assert!(found.dir().starts_with(templates.store(&alice).dir()));
        let found = template(&named("web"), &bob, &templates).unwrap().unwrap();
        assert!(found.dir().starts_with(templates.server().dir()));
        let refused = template(&named("mine"), &bob, &templates).unwrap_err();
        assert_eq!(reason_of(&refused), Some(ErrorReason::NotFound));
        let refused = template(&named("mine"), &owner, &templates).unwrap_err();
        assert_eq!(reason_of(&refused), Some(ErrorReason::NotFound));
    }

    #[test]
    fn a_template_refuses_another_size_or_root() {
        let dir = tempfile::tempdir().unwrap();
        let templates = stores(dir.path());
        let owner = Principal::Owner;
        put(templates.server(), "web");
        let bigger = api::CreateSandboxRequest {
            memory_mib: 512,
            ..named("web")
        };
        let refused = template(&bigger, &owner, &templates).unwrap_err();
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
        assert!(template(&same, &owner, &templates).is_ok());
        let with_image = api::CreateSandboxRequest {
            image: "default".to_owned(),
            ..named("web")
        };
        let refused = template(&with_image, &owner, &templates).unwrap_err();
        assert!(
            refused.message().contains("its own root image"),
            "{refused:?}"
        );
        let refused = template(&named("a b"), &owner, &templates).unwrap_err();
        assert_eq!(field_of(&refused), Some("template"));
    }
}
