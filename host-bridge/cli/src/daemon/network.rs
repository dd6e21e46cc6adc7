//! The work of the network calls on a running sandbox: its policy, a change
//! of its rules, its audit. The change is one read, edit and write of the
//! policy under the daemon's lock, so two clients changing rules at once
//! both get their way.

use std::sync::Mutex;

use airlock::{NetRule, NetworkPolicy, Sandbox};
use airlock_proto::daemon::v1 as pb;
use tonic::{Code, Status};

use super::wire;

/// The rules of `sandbox`'s policy.
pub fn policy(sandbox: &Sandbox) -> Result<pb::NetworkPolicyResponse, Status> {
    let policy = sandbox
        .network_policy()
        .map_err(|e| wire::network_status(sandbox.id(), &e))?;
    Ok(pb::NetworkPolicyResponse {
        rules: wire::rule_texts(&policy),
    })
}

/// Applies `request` to `sandbox`'s policy; `lock` is held from reading
/// the policy to writing it back.
pub fn change(
    sandbox: &Sandbox,
    lock: &Mutex<()>,
    request: &pb::ChangeNetworkPolicyRequest,
) -> Result<pb::NetworkPolicyResponse, Status> {
    let allow = wire::rules(&request.allow)?;
    let deny = wire::rules(&request.deny)?;
    let failed = |e: airlock::Error| wire::network_status(sandbox.id(), &e);
    let _held = lock
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let policy = sandbox.network_policy().map_err(failed)?;
    let changed = changed(&policy, &allow, &deny).map_err(|message| {
        wire::status(
            Code::InvalidArgument,
            pb::ErrorReason::InvalidArgument,
            message,
        )
    })?;
    if changed != policy {
        tracing::info!(
            id = sandbox.id(),
            rules = %wire::rule_texts(&changed).join(" "),
            "network policy changed"
        );
        sandbox
            .set_network_policy(changed.clone())
            .map_err(failed)?;
    }
    Ok(pb::NetworkPolicyResponse {
        rules: wire::rule_texts(&changed),
    })
}

/// `sandbox`'s audit records, oldest first.
pub fn audit(sandbox: &Sandbox) -> Result<pb::NetworkAuditResponse, Status> {
    let records = sandbox
        .network_audit()
        .map_err(|e| wire::network_status(sandbox.id(), &e))?;
    Ok(pb::NetworkAuditResponse {
        records: records.iter().map(wire::audit_record).collect(),
    })
}

/// `policy` without the `deny` rules (each of which it must have) and then
/// with the `allow` rules it does not have yet, in order; or what to say
/// about a `deny` rule it does not have.
fn changed(
    policy: &NetworkPolicy,
    allow: &[NetRule],
    deny: &[NetRule],
) -> Result<NetworkPolicy, String> {
    if let Some(missing) = deny.iter().find(|rule| !policy.rules().contains(rule)) {
        let rules = wire::rule_texts(policy);
        let listed = match rules.is_empty() {
            true => "it has none".to_owned(),
            false => format!("its rules: {}", rules.join(" ")),
        };
        return Err(format!(
            "the policy has no rule {missing} to remove ({listed}); nothing changed"
        ));
    }
    let mut rules: Vec<NetRule> = policy
        .rules()
        .iter()
        .filter(|rule| !deny.contains(rule))
        .cloned()
        .collect();
    for rule in allow {
        if !rules.contains(rule) {
            rules.push(rule.clone());
        }
    }
    Ok(NetworkPolicy::from_rules(rules))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn rules(texts: &[&str]) -> Vec<NetRule> {
        texts.iter().map(|text| text.parse().unwrap()).collect()
    }

    fn texts(policy: &NetworkPolicy) -> Vec<String> {
        wire::rule_texts(policy)
    }

    #[test]
    fn denied_rules_go_then_new_ones_are_appended_once() {
        let policy = NetworkPolicy::from_rules(rules(&["pypi.org", "127.0.0.1/32"]));
        let after = changed(
            &policy,
            &rules(&["files.pythonhosted.org", "PyPI.org", "192.0.2.9/32:80"]),
            &rules(&["127.0.0.1"]),
        )
        .unwrap();
        assert_eq!(
            texts(&after),
            ["pypi.org", "files.pythonhosted.org", "192.0.2.9:80"]
        );
        assert_eq!(changed(&policy, &[], &[]).unwrap(), policy);
    }

    #[test]
    fn denying_a_rule_the_policy_lacks_changes_nothing_and_says_so() {
        let policy = NetworkPolicy::from_rules(rules(&["pypi.org"]));
        let error = changed(&policy, &rules(&["a.test"]), &rules(&["pypi.org:443"])).unwrap_err();
        assert!(
            error.contains("no rule pypi.org:443") && error.contains("its rules: pypi.org"),
            "{error}"
        );
        let error = changed(&NetworkPolicy::new(), &[], &rules(&["a.test"])).unwrap_err();
        assert!(error.contains("it has none"), "{error}");
    }
}
