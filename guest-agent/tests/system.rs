//! System.Shutdown outside a VM: the agent answers, then exits 0.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use airlock_proto::v1::ShutdownRequest;
use common::Agent;

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
