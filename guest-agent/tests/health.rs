//! Health over the real binary.

#![allow(clippy::unwrap_used)]

mod common;

use airlock_proto::v1::CheckRequest;
use common::Agent;

#[tokio::test]
async fn health_answers_with_version_revision_and_ordered_times() {
    let agent = Agent::start().await;
    let answer = agent
        .health()
        .check(CheckRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.agent_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(answer.protocol_revision, airlock_proto::PROTOCOL_REVISION);
    assert!(answer.init_started_us > 0);
    assert!(
        answer.init_started_us <= answer.serving_since_us,
        "{answer:?}"
    );
    assert!(answer.serving_since_us <= answer.uptime_us, "{answer:?}");

    let later = agent
        .health()
        .check(CheckRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(later.uptime_us > answer.uptime_us);
    assert_eq!(later.serving_since_us, answer.serving_since_us);
}
