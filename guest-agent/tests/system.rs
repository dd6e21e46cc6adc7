//! System outside a VM: Shutdown answers, then the agent exits 0;
//! Personalize checks its request but changes nothing on the host.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use airlock_proto::v1::{CheckRequest, PersonalizeRequest, ShutdownRequest};
use common::Agent;
use tonic::Code;

#[tokio::test]
async fn shutdown_answers_then_agent_exits_cleanly() {
    let mut agent = Agent::start().await;
    agent.system().shutdown(ShutdownRequest {}).await.unwrap();
    let status = agent
        .wait_exit(Duration::from_secs(20))
        .await
        .unwrap_or_else(|| panic!("agent still running after shutdown:\n{}", agent.log()));
    assert!(status.success(), "{status}:\n{}", agent.log());
    assert!(!agent.socket().exists(), "socket left behind");
}

fn personalize_request() -> PersonalizeRequest {
    PersonalizeRequest {
        entropy: vec![0x42; 64].into(),
        unix_nanos: 1_700_000_000_000_000_000,
        hostname: "clone-1".to_owned(),
        sandbox_id: "sb-1".to_owned(),
    }
}

#[tokio::test]
async fn personalize_refuses_bad_requests_with_invalid_argument() {
    let agent = Agent::start().await;
    let bad = [
        PersonalizeRequest {
            entropy: vec![1; 16].into(),
            ..personalize_request()
        },
        PersonalizeRequest {
            hostname: String::new(),
            ..personalize_request()
        },
        PersonalizeRequest {
            unix_nanos: 0,
            ..personalize_request()
        },
    ];
    for request in bad {
        let status = agent
            .system()
            .personalize(request.clone())
            .await
            .unwrap_err();
        assert_eq!(
            status.code(),
            Code::InvalidArgument,
            "{request:?}: {status}"
        );
    }
}

#[tokio::test]
async fn personalize_outside_a_guest_is_a_failed_precondition_and_records_nothing() {
    let agent = Agent::start().await;
    let status = agent
        .system()
        .personalize(personalize_request())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status}");
    let health = agent
        .health()
        .check(CheckRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.sandbox_id, "");
}
