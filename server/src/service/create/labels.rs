//! The labels section of a create: `metadata` (the sandbox's labels) and
//! `envs` (its environment, under every program's own).

use std::collections::{BTreeMap, HashMap};

use tonic::Status;

use crate::validate;

/// A create's labels and environment, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labels {
    pub metadata: BTreeMap<String, String>,
    pub envs: BTreeMap<String, String>,
}

/// `metadata` and `envs` checked: bounded, keys of a safe alphabet,
/// variable names valid, values without NUL.
pub fn labels(
    metadata: &HashMap<String, String>,
    envs: &HashMap<String, String>,
) -> Result<Labels, Status> {
    validate::labels("metadata", metadata)?;
    let envs = validate::envs("envs", envs)?;
    Ok(Labels {
        metadata: metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        envs,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use airlock_api::reason::field_of;

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn labels_and_variables_are_kept_sorted() {
        let checked = labels(&map(&[("team/b", "2"), ("a", "1")]), &map(&[("X", "y")])).unwrap();
        assert_eq!(checked.metadata.keys().collect::<Vec<_>>(), ["a", "team/b"]);
        assert_eq!(checked.envs.get("X").map(String::as_str), Some("y"));
    }

    #[test]
    fn a_bad_label_names_metadata_and_a_bad_variable_envs() {
        let refused = labels(&map(&[("a b", "")]), &map(&[("1X", "")])).unwrap_err();
        assert_eq!(field_of(&refused), Some("metadata"));
        let refused = labels(&HashMap::new(), &map(&[("1X", "")])).unwrap_err();
        assert_eq!(field_of(&refused), Some("envs"));
        assert!(
            refused.message().contains("is not a variable name"),
            "{refused:?}"
        );
    }
}
