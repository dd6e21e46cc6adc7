//! Who may call: every TCP call needs a valid key; the Unix socket is the
//! owner's; key management is the owner's alone; repeated failures from one
//! address are slowed down. On a real server (process backend, no VMs).

#![allow(clippy::unwrap_used)]

use airlock_client::api;
use airlock_testkit::{refusal, Options, TestServer};
use tonic::Code;

#[tokio::test]
async fn the_unix_socket_is_the_owner_and_tcp_needs_a_key() {
    let server = TestServer::start(Options::default()).await;
    let ping = server.owner().await.ping().await.unwrap();
    assert_eq!(ping.principal, "owner");
    assert_eq!(ping.api_revision, airlock_api::REVISION);
    assert!(ping.features.contains(&"keys".to_owned()), "{ping:?}");

    let anonymous = server.remote(None).await;
    let refused = anonymous
        .sandboxes()
        .ping(api::PingRequest {})
        .await
        .unwrap_err();
    assert_eq!(
        refusal(&refused),
        (
            Code::Unauthenticated,
            Some(api::ErrorReason::Unauthenticated)
        )
    );
    assert!(refused.message().contains("AIRLOCK_API_KEY"), "{refused:?}");

    let key = server.key("ci", api::KeyQuota::default()).await;
    let ping = server.remote(Some(&key)).await.ping().await.unwrap();
    assert_eq!(ping.principal, "key:ci");
    assert_eq!(ping.pid, 0, "a key is not told the server's pid");

    // A key of the right form that the server never made.
    let wrong = format!("ak_{}", "A".repeat(43));
    let refused = server
        .remote(Some(&wrong))
        .await
        .sandboxes()
        .list(api::ListSandboxesRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);
    // And one of the wrong form.
    let refused = server
        .remote(Some("not-a-key"))
        .await
        .sandboxes()
        .ping(api::PingRequest {})
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);
    server.stop().await;
}

#[tokio::test]
async fn a_removed_key_is_refused_at_its_next_call() {
    let server = TestServer::start(Options::default()).await;
    let key = server.key("temp", api::KeyQuota::default()).await;
    let client = server.remote(Some(&key)).await;
    client.ping().await.unwrap();
    server
        .owner()
        .await
        .keys()
        .remove_key(api::RemoveKeyRequest {
            name: "temp".into(),
        })
        .await
        .unwrap();
    let refused = client
        .sandboxes()
        .ping(api::PingRequest {})
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);
    let listed = server
        .owner()
        .await
        .keys()
        .list_keys(api::ListKeysRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(listed.keys.is_empty(), "{listed:?}");
    server.stop().await;
}

#[tokio::test]
async fn keys_are_managed_on_the_unix_socket_only() {
    let server = TestServer::start(Options::default()).await;
    let key = server.key("ci", api::KeyQuota::default()).await;
    let mut keys = server.remote(Some(&key)).await.keys();
    let refused = keys
        .create_key(api::CreateKeyRequest {
            name: "escalate".into(),
            quota: None,
        })
        .await
        .unwrap_err();
    assert_eq!(
        refusal(&refused),
        (Code::PermissionDenied, Some(api::ErrorReason::OwnerOnly))
    );
    assert_eq!(
        keys.list_keys(api::ListKeysRequest {})
            .await
            .unwrap_err()
            .code(),
        Code::PermissionDenied
    );
    assert_eq!(
        keys.remove_key(api::RemoveKeyRequest { name: "ci".into() })
            .await
            .unwrap_err()
            .code(),
        Code::PermissionDenied
    );
    // The owner: a duplicate name, a bad name.
    let mut owner = server.owner().await.keys();
    let duplicate = owner
        .create_key(api::CreateKeyRequest {
            name: "ci".into(),
            quota: None,
        })
        .await
        .unwrap_err();
    assert_eq!(duplicate.code(), Code::AlreadyExists);
    let bad = owner
        .create_key(api::CreateKeyRequest {
            name: "a b".into(),
            quota: None,
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert_eq!(airlock_client::reason::field_of(&bad), Some("name"));
    server.stop().await;
}

#[tokio::test]
async fn repeated_failures_from_one_address_are_slowed_down() {
    let server = TestServer::start(Options::default()).await;
    let key = server.key("ci", api::KeyQuota::default()).await;
    let wrong = format!("ak_{}", "B".repeat(43));
    let client = server.remote(Some(&wrong)).await;
    let mut codes = Vec::new();
    for _ in 0..7 {
        codes.push(
            client
                .sandboxes()
                .ping(api::PingRequest {})
                .await
                .unwrap_err(),
        );
    }
    assert!(
        codes[..5].iter().all(|s| s.code() == Code::Unauthenticated),
        "{codes:?}"
    );
    let limited = codes.last().unwrap();
    assert_eq!(
        refusal(limited),
        (Code::ResourceExhausted, Some(api::ErrorReason::RateLimited))
    );
    assert!(limited.message().contains("retry in"), "{limited:?}");
    // Even the right key waits out the block from that address.
    let good = server.remote(Some(&key)).await;
    assert_eq!(
        good.sandboxes()
            .ping(api::PingRequest {})
            .await
            .unwrap_err()
            .code(),
        Code::ResourceExhausted
    );
    // The owner's socket is not throttled.
    server.owner().await.ping().await.unwrap();
    server.stop().await;
}

#[tokio::test]
async fn tls_with_a_private_ca_and_a_key() {
    let server = TestServer::start(Options {
        tls: true,
        ..Options::default()
    })
    .await;
    let key = server.key("ci", api::KeyQuota::default()).await;
    let ping = server.remote(Some(&key)).await.ping().await.unwrap();
    assert_eq!(ping.principal, "key:ci");
    assert!(ping.features.contains(&"tls".to_owned()), "{ping:?}");
    // Without the CA the server's certificate is not trusted.
    let untrusting = airlock_client::Endpoint::remote(
        &format!("https://localhost:{}", server.tcp.port()),
        Some(key.clone()),
        None,
    )
    .unwrap()
    .connect()
    .await;
    let failed = match untrusting {
        Err(error) => Some(error.to_string()),
        Ok(client) => client.ping().await.err().map(|e| e.to_string()),
    };
    assert!(failed.is_some(), "an unknown CA was trusted");
    server.stop().await;
}

#[tokio::test]
async fn plain_tcp_is_refused_off_loopback_and_without_insecure() {
    let refused = airlock_server::TcpEndpoint::bind("127.0.0.1:0".parse().unwrap(), None, false)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("TLS"), "{refused}");
    let refused = airlock_server::TcpEndpoint::bind("0.0.0.0:0".parse().unwrap(), None, true)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("loopback"), "{refused}");
}

/// A newcomer's `openssl req -x509` certificate (a CA's) is refused when
/// the server starts, naming the file and what to give; docs/cli.md's
/// commands (a CA, then a leaf signed by it) make one it serves with.
#[tokio::test]
async fn a_ca_certificate_is_refused_at_start_and_a_signed_leaf_serves() {
    let dir = tempfile::tempdir().unwrap();
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir.path())
            .output()
            .expect("openssl (Debian's package) is installed");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let with = |head: &[&'static str], tail: &[&'static str]| -> Vec<&'static str> {
        head.iter()
            .chain(ec.iter())
            .chain(tail.iter())
            .copied()
            .collect()
    };
    openssl(&with(
        &["req", "-x509"],
        &[
            "-subj",
            "/CN=localhost",
            "-days",
            "1",
            "-keyout",
            "self.key",
            "-out",
            "self.pem",
        ],
    ));
    let files = |cert: &str, key: &str| airlock_server::TlsFiles {
        cert: dir.path().join(cert),
        key: dir.path().join(key),
    };
    let refused = airlock_server::TcpEndpoint::bind(
        "127.0.0.1:0".parse().unwrap(),
        Some(files("self.pem", "self.key")),
        false,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(refused.contains("self.pem"), "{refused}");
    assert!(
        refused.contains("CA:TRUE") && refused.contains("leaf certificate"),
        "{refused}"
    );

    openssl(&with(
        &["req", "-x509", "-new"],
        &[
            "-days",
            "2",
            "-subj",
            "/CN=test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    ));
    openssl(&with(
        &["req", "-new"],
        &[
            "-subj",
            "/CN=localhost",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
    ));
    std::fs::write(
        dir.path().join("server.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "server.ext",
        "-out",
        "server.pem",
    ]);
    airlock_server::TcpEndpoint::bind(
        "127.0.0.1:0".parse().unwrap(),
        Some(files("server.pem", "server.key")),
        false,
    )
    .await
    .expect("a leaf signed by a CA serves");
}

/// A tenant holding one valid key guesses another's: forty wrong keys,
/// each followed by a call with its own valid key, from one address. The
/// valid calls do not reset the count: the address is refused
/// RATE_LIMITED (saying when to retry), valid key or not, while the owner's
/// socket and a tenant at another address are served.
#[tokio::test]
async fn a_valid_key_between_wrong_ones_does_not_reset_the_throttle() {
    let server = TestServer::start(Options::default()).await;
    let own = server.key("guesser", api::KeyQuota::default()).await;
    let other = server.key("bystander", api::KeyQuota::default()).await;
    let from = std::net::Ipv4Addr::new(127, 0, 0, 1);
    let channel = airlock_testkit::channel_from(&server, from).await;
    let mut limited = 0;
    let mut last = None;
    for i in 0..40 {
        let wrong = format!("ak_{}{:02}", "C".repeat(41), i);
        let refused = airlock_testkit::sandboxes_with_key(channel.clone(), &wrong)
            .ping(api::PingRequest {})
            .await
            .unwrap_err();
        if refusal(&refused) == (Code::ResourceExhausted, Some(api::ErrorReason::RateLimited)) {
            limited += 1;
        }
        let answer = airlock_testkit::sandboxes_with_key(channel.clone(), &own)
            .ping(api::PingRequest {})
            .await;
        last = Some(answer);
    }
    assert!(
        limited >= 30,
        "only {limited} of 40 wrong keys were rate limited"
    );
    let refused = last.unwrap().unwrap_err();
    assert_eq!(
        refusal(&refused),
        (Code::ResourceExhausted, Some(api::ErrorReason::RateLimited)),
        "the valid key from the guessing address: {refused:?}"
    );
    assert!(refused.message().contains("retry in"), "{refused:?}");

    // Another address, another tenant: served at once.
    let elsewhere =
        airlock_testkit::channel_from(&server, std::net::Ipv4Addr::new(127, 0, 0, 2)).await;
    let ping = airlock_testkit::sandboxes_with_key(elsewhere, &other)
        .ping(api::PingRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ping.principal, "key:bystander");
    // The owner's socket is not throttled.
    server.owner().await.ping().await.unwrap();
    server.stop().await;
}
