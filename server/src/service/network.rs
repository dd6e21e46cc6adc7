//! `airlock.api.v1.Network`: a sandbox's rules and audit log. A change is
//! one read, edit and write of the policy under the server's lock, so two
//! clients changing rules at once both get their way. A rule that reaches
//! only the host itself is refused unless the sandbox's host access (its
//! principal's, fixed at create) allows it.

use tonic::{Request, Response, Status};

use airlock::{NetRule, NetworkPolicy, Sandbox};
use airlock_api::limits;
use airlock_api::reason::{self, invalid};
use airlock_api::v1::{self as api, network_server, ErrorReason};

use super::Services;
use crate::convert;
use crate::registry::Entry;
use crate::service::create::host_rules;
use crate::status::error_status;
use crate::validate;

/// `rules` parsed, or INVALID_ARGUMENT naming `field` and the rule.
fn parse(field: &str, rules: &[String]) -> Result<Vec<NetRule>, Status> {
    validate::count(field, rules, limits::MAX_RULES)?;
    rules
        .iter()
        .map(|text| {
            text.parse::<NetRule>()
                .map_err(|error| invalid(field, format!("{text:?}: {error}")))
        })
        .collect()
}

/// The policy in force, or NO_NETWORK for a sandbox created without one.
fn policy_of(sandbox: &Sandbox) -> Result<NetworkPolicy, Status> {
    sandbox.network_policy().map_err(|error| match error {
        airlock::Error::Config(_) => no_network(sandbox.id()),
        other => error_status(&other),
    })
}

fn no_network(id: &str) -> Status {
    reason::status(
        ErrorReason::NoNetwork,
        format!(
            "sandbox {id} was created without network and cannot get one now; create a sandbox \
             with an allow rule (allow_net) or a secret"
        ),
    )
}

fn answer(entry: &Entry, policy: &NetworkPolicy) -> api::NetworkPolicy {
    api::NetworkPolicy {
        rules: policy.rules().iter().map(ToString::to_string).collect(),
        secrets: entry
            .record
            .secrets
            .iter()
            .map(|(name, hosts)| api::BoundSecret {
                name: name.clone(),
                hosts: hosts.clone(),
            })
            .collect(),
    }
}

/// `policy` with each `deny` rule removed (each must be one of its rules)
/// and then each `allow` rule added that it lacks.
fn changed(
    policy: &NetworkPolicy,
    allow: &[NetRule],
    deny: &[NetRule],
) -> Result<NetworkPolicy, Status> {
    let mut rules: Vec<NetRule> = policy.rules().to_vec();
    for rule in deny {
        let Some(at) = rules.iter().position(|r| r == rule) else {
            return Err(invalid(
                "deny",
                format!("no rule {rule} to remove (see the rules in force); nothing changed"),
            ));
        };
        rules.remove(at);
    }
    for rule in allow {
        if !rules.contains(rule) {
            rules.push(rule.clone());
        }
    }
    if rules.len() > limits::MAX_RULES {
        return Err(invalid(
            "allow",
            format!(
                "the policy would have more than {} rules",
                limits::MAX_RULES
            ),
        ));
    }
    Ok(NetworkPolicy::from_rules(rules))
}

#[tonic::async_trait]
impl network_server::Network for Services {
    async fn get_policy(
        &self,
        request: Request<api::GetPolicyRequest>,
    ) -> Result<Response<api::NetworkPolicy>, Status> {
        let call = self.call(&request)?;
        let (entry, handle) = call.sandbox(&request.get_ref().sandbox_id).await?;
        let policy = policy_of(&handle)?;
        Ok(Response::new(answer(&entry, &policy)))
    }

    async fn replace_policy(
        &self,
        request: Request<api::ReplacePolicyRequest>,
    ) -> Result<Response<api::NetworkPolicy>, Status> {
        let call = self.call(&request)?;
        let request = request.into_inner();
        let rules = parse("rules", &request.rules)?;
        let (entry, handle) = call.sandbox(&request.sandbox_id).await?;
        let _held = self.state.policy_changes.lock().await;
        policy_of(&handle)?;
        host_rules("rules", &rules, handle.host_access())?;
        let policy = NetworkPolicy::from_rules(rules);
        handle
            .set_network_policy(policy.clone())
            .map_err(|error| error_status(&error))?;
        tracing::info!(id = request.sandbox_id, principal = %call.principal, rules = policy.rules().len(), "network policy replaced");
        Ok(Response::new(answer(&entry, &policy)))
    }

    async fn change_policy(
        &self,
        request: Request<api::ChangePolicyRequest>,
    ) -> Result<Response<api::NetworkPolicy>, Status> {
        let call = self.call(&request)?;
        let request = request.into_inner();
        let allow = parse("allow", &request.allow)?;
        let deny = parse("deny", &request.deny)?;
        let (entry, handle) = call.sandbox(&request.sandbox_id).await?;
        let _held = self.state.policy_changes.lock().await;
        let policy = policy_of(&handle)?;
        // A key's sandbox never reaches the host: its host access is
        // denied at create, whatever rule it asks for later.
        host_rules("allow", &allow, handle.host_access())?;
        let new = changed(&policy, &allow, &deny)?;
        if new != policy {
            handle
                .set_network_policy(new.clone())
                .map_err(|error| error_status(&error))?;
            tracing::info!(id = request.sandbox_id, principal = %call.principal, "network policy changed");
        }
        Ok(Response::new(answer(&entry, &new)))
    }

    async fn audit(
        &self,
        request: Request<api::AuditRequest>,
    ) -> Result<Response<api::AuditResponse>, Status> {
        let call = self.call(&request)?;
        let request = request.into_inner();
        let (_, handle) = call.sandbox(&request.sandbox_id).await?;
        // With a network, egress and ingress records; without, ingress's.
        let records = handle.audit(request.after_seq);
        Ok(Response::new(api::AuditResponse {
            records: records.iter().map(convert::audit_record).collect(),
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn rules(texts: &[&str]) -> Vec<NetRule> {
        texts.iter().map(|t| t.parse().unwrap()).collect()
    }

    #[test]
    fn a_change_removes_then_adds_and_refuses_unknown_rules() {
        let policy = NetworkPolicy::from_rules(rules(&["a.example", "10.0.0.0/8"]));
        let new = changed(
            &policy,
            &rules(&["b.example", "a.example"]),
            &rules(&["10.0.0.0/8"]),
        )
        .unwrap();
        let texts: Vec<String> = new.rules().iter().map(ToString::to_string).collect();
        assert_eq!(texts, ["a.example", "b.example"]);
        let refused = changed(&policy, &[], &rules(&["c.example"])).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
        assert_eq!(airlock_api::reason::field_of(&refused), Some("deny"));
        assert!(parse("allow", &["not a rule!".into()]).is_err());
    }
}
