//! What the connected agent can do: its protocol revision, checked against
//! the contract's [`Feature`]s in one place.

use airlock_proto::Feature;

use crate::error::{Error, Result};

/// The features of the agent a sandbox talks to, from the revision its
/// `Health` answer reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AgentFeatures {
    revision: u32,
}

impl AgentFeatures {
    pub fn new(revision: u32) -> Self {
        AgentFeatures { revision }
    }

    /// The agent's protocol revision.
    pub fn revision(self) -> u32 {
        self.revision
    }

    /// Whether the agent has `feature`.
    pub fn has(self, feature: Feature) -> bool {
        feature.supported_by(self.revision)
    }

    /// Fails with [`Error::AgentTooOld`] unless the agent has `feature`.
    pub fn require(self, feature: Feature) -> Result<()> {
        if self.has(feature) {
            return Ok(());
        }
        Err(Error::AgentTooOld {
            feature,
            needed: feature.revision(),
            found: self.revision,
        })
    }

    /// [`require`](Self::require) for a feature that may not be needed.
    pub fn require_all(self, feature: Option<Feature>) -> Result<()> {
        feature.map_or(Ok(()), |feature| self.require(feature))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_agent_is_refused_with_what_it_lacks() {
        let agent = AgentFeatures::new(2);
        assert!(agent.require(Feature::Attach).is_ok());
        assert!(agent.require_all(None).is_ok());
        let error = agent.require(Feature::Files).unwrap_err();
        assert!(
            matches!(
                error,
                Error::AgentTooOld {
                    feature: Feature::Files,
                    needed: 3,
                    found: 2
                }
            ),
            "{error}"
        );
        assert!(error.to_string().contains("the Files service"), "{error}");
    }
}
