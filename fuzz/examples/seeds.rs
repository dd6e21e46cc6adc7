//! Writes the seed corpora in `fuzz/seeds/<target>/`: the inputs of the
//! library's and the server's unit tests (a real ClientHello, the DNS
//! queries, tars made by the `tar` crate, saved files and templates as the
//! library writes them, create requests, E2B create bodies and Connect
//! envelopes), in each target's input layout. The seeds are committed; run
//! this again after changing a layout:
//!
//! ```sh
//! cargo run --release --manifest-path fuzz/Cargo.toml --example seeds
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use airlock::saved::{SavedRecord, SavedUsage, SavedVm, SnapshotHeader, SNAPSHOT_FORMAT};
use airlock::template::{FileId, TemplateInputs, TemplateMeta, TEMPLATE_FORMAT};
use airlock_fuzz::create_context::{SNAPSHOT, SNAPSHOT_MEMORY_MIB, SNAPSHOT_VCPUS};
use airlock_fuzz::saved_input::{self, Snapshot};
use airlock_fuzz::{put_field, template_input};
use airlock_proto::opening::{HostOpening, Nonce};
use airlock_proto::v1;
use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};
use prost::Message as _;

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

const NONCE: u64 = 0x0123_4567_89ab_cdef;
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn main() -> Result {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let seeds = Seeds { root };
    opening(&seeds)?;
    dns(&seeds)?;
    sniff(&seeds)?;
    http(&seeds)?;
    destinations(&seeds)?;
    tar_extract(&seeds)?;
    agent_files(&seeds)?;
    template_store(&seeds)?;
    saved_file(&seeds)?;
    api_create(&seeds)?;
    e2b_create(&seeds)?;
    connect_envelopes(&seeds)?;
    Ok(())
}

struct Seeds {
    root: PathBuf,
}

impl Seeds {
    fn write(&self, target: &str, name: &str, bytes: &[u8]) -> Result {
        let dir = self.root.join(target);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(name), bytes)?;
        Ok(())
    }
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn opening(s: &Seeds) -> Result {
    let nonce = Nonce::new(NONCE);
    let other = Nonce::new(1);
    let host = HostOpening::new(nonce);
    let t = "opening";
    s.write(
        t,
        "host_answer",
        &cat(&[&[0, 0], b"junk", &nonce.ready(), b"\0\0\x06settings"]),
    )?;
    s.write(
        t,
        "host_answer_split",
        &cat(&[&[0, 7], &other.ready(), &nonce.ready(), b"\0\0\x06settings"]),
    )?;
    s.write(
        t,
        "guest_junk_repeats",
        &cat(&[
            &[1, 0],
            b"\0\x01stale http/2 bytes",
            &nonce.hello(),
            &nonce.hello(),
            PREFACE,
        ]),
    )?;
    s.write(
        t,
        "guest_flush",
        &cat(&[&[1, 3], &host.flush()[..64], &nonce.hello(), PREFACE]),
    )?;
    s.write(
        t,
        "guest_partial_repeat",
        &cat(&[&[1, 5], &nonce.hello(), &nonce.hello()[..5]]),
    )?;
    s.write(
        t,
        "guest_malformed",
        &cat(&[
            &[1, 0],
            b"airlock-hello 00000000000000XY\n",
            b"airlock-hello 0000000000000001",
        ]),
    )?;
    s.write(t, "flush_max_frame", &[0xf0, 0xff, 0xff, 0, 0, 0x10, 0])?;
    s.write(t, "flush_small_frame", &[0xf0, 3, 0, 4, 1, 2, 0])?;
    Ok(())
}

fn query(id: u16, name: &str, record_type: RecordType) -> Result<Vec<u8>> {
    let mut message = Message::new();
    message
        .set_id(id)
        .set_recursion_desired(true)
        .add_query(Query::query(Name::from_ascii(name)?, record_type));
    Ok(message.to_vec()?)
}

fn dns(s: &Seeds) -> Result {
    let fields = |queries: &[Vec<u8>]| {
        let mut out = Vec::new();
        for q in queries {
            put_field(&mut out, q);
        }
        out
    };
    let t = "dns";
    s.write(
        t,
        "allowed_twice",
        &fields(&[
            query(0x4242, "API.allowed.test.", RecordType::A)?,
            query(0x4243, "allowed.test", RecordType::A)?,
        ]),
    )?;
    s.write(
        t,
        "refused",
        &fields(&[query(1, "evil.com.", RecordType::A)?]),
    )?;
    s.write(
        t,
        "types",
        &fields(&[
            query(2, "allowed.test", RecordType::AAAA)?,
            query(3, "allowed.test", RecordType::MX)?,
            query(4, "port.test", RecordType::A)?,
        ]),
    )?;
    s.write(
        t,
        "wildcard_eviction",
        &fields(&[
            query(5, "a.wild.test", RecordType::A)?,
            query(6, "b.wild.test", RecordType::A)?,
            query(7, "c.d.wild.test", RecordType::A)?,
            query(8, "wild.test", RecordType::A)?,
            query(9, "a.wild.test", RecordType::A)?,
        ]),
    )?;
    let dotted = Name::from_labels([&b"allowed.test"[..], &b"x"[..]])?;
    let mut message = Message::new();
    message.add_query(Query::query(dotted, RecordType::A));
    let mut two = Message::new();
    two.set_id(8)
        .add_query(Query::query(
            Name::from_ascii("allowed.test")?,
            RecordType::A,
        ))
        .add_query(Query::query(
            Name::from_ascii("allowed.test")?,
            RecordType::AAAA,
        ));
    let mut reply = Message::new();
    reply
        .set_id(9)
        .set_message_type(MessageType::Response)
        .add_query(Query::query(
            Name::from_ascii("allowed.test")?,
            RecordType::A,
        ));
    let mut notify = Message::new();
    notify
        .set_id(11)
        .set_op_code(OpCode::Notify)
        .add_query(Query::query(
            Name::from_ascii("allowed.test")?,
            RecordType::SOA,
        ));
    s.write(
        t,
        "odd_messages",
        &fields(&[
            message.to_vec()?,
            two.to_vec()?,
            reply.to_vec()?,
            notify.to_vec()?,
            b"\x12\x34garbage".to_vec(),
        ]),
    )?;
    Ok(())
}

/// A real ClientHello, as rustls (ring) sends it.
fn client_hello(server_name: &str) -> Result<Vec<u8>> {
    use rustls::pki_types::ServerName;
    use rustls::{ClientConfig, ClientConnection, RootCertStore};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let name = ServerName::try_from(server_name.to_owned())?;
    let mut conn = ClientConnection::new(Arc::new(config), name)?;
    let mut bytes = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut bytes)?;
    }
    Ok(bytes)
}

fn sniff(s: &Seeds) -> Result {
    let t = "sniff";
    s.write(
        t,
        "get",
        b"\0GET / HTTP/1.1\r\nHost: API.Test:8443\r\nAccept: */*\r\n\r\n",
    )?;
    s.write(
        t,
        "get_split",
        b"\x09GET /x HTTP/1.1\r\nHost: api.test\r\n\r\nbody",
    )?;
    s.write(
        t,
        "absolute",
        b"\0GET http://user@api.test:80/p?q HTTP/1.1\r\nHost: api.test\r\n\r\n",
    )?;
    s.write(
        t,
        "mismatch",
        b"\0GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n",
    )?;
    s.write(t, "connect", b"\0CONNECT [::1]:443 HTTP/1.1\r\n\r\n")?;
    s.write(
        t,
        "two_hosts",
        b"\0GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n",
    )?;
    s.write(t, "other", b"\0SSH-2.0-OpenSSH_9.2\r\n")?;
    s.write(t, "partial", b"\0GE")?;
    s.write(t, "tls", &cat(&[&[0], &client_hello("api.test")?]))?;
    s.write(
        t,
        "tls_split",
        &cat(&[&[13], &client_hello("Example.COM")?]),
    )?;
    Ok(())
}

fn http(s: &Seeds) -> Result {
    let heads: [(&str, u8, &[u8]); 9] = [
        ("placeholders", 0, b"GET /q?key={KEY} HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer {API}\r\n\r\n"),
        ("absolute", 0, b"GET http://user@API.test:8080/x?y=1 HTTP/1.1\r\n\r\n"),
        ("elsewhere_header", 0, b"GET / HTTP/1.1\r\nHost: api.test\r\nX-K: {ELSE}\r\n\r\n"),
        ("elsewhere_target", 0, b"GET /?k={ELSE} HTTP/1.1\r\nHost: api.test\r\n\r\n"),
        ("hop_by_hop", 0, b"GET / HTTP/1.1\r\nHost: api.test\r\nConnection: keep-alive, x-private, host\r\nX-Private: 1\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic abc\r\nUpgrade: websocket\r\nX-Kept: 1\r\n\r\n"),
        ("connect", 0, b"CONNECT api.test:443 HTTP/1.1\r\nHost: api.test\r\n\r\n"),
        ("misdirected", 1, b"GET / HTTP/1.1\r\nHost: other.test:443\r\n\r\n"),
        ("wildcard", 2, b"POST /w HTTP/1.1\r\nHost: A.Wild.Test\r\nX-Token: {WILD}\r\nContent-Length: 3\r\n\r\nabc"),
        ("no_host", 3, b"GET / HTTP/1.0\r\n\r\n"),
    ];
    for (name, host, head) in heads {
        let input = cat(&[&[host], head]);
        s.write("http_request", name, &input)?;
        s.write("http_gate", name, &input)?;
    }
    s.write("http_gate", "keep_alive", &cat(&[
        &[0],
        b"GET /one HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer {KEY}\r\n\r\n",
        b"POST /two HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{AP\r\n0\r\n\r\n",
        b"GET /three HTTP/1.1\r\nHost: api.test\r\nX: {ELSE}\r\n\r\n",
        b"GET /four HTTP/1.1\r\nHost: api.test\r\n\r\n",
    ]))?;
    Ok(())
}

fn destinations(s: &Seeds) -> Result {
    let mut ops = vec![2u8];
    for rule in [
        "api.example.com",
        "*.example.com:443",
        "10.0.0.0/8:5432",
        "[fd00::]/8:443",
        "127.0.0.1",
        "[::1]:443",
        "::ffff:0:0/96",
    ] {
        ops.push(0);
        put_field(&mut ops, rule.as_bytes());
    }
    for name in [
        "API.example.com.",
        "b.test",
        "c.test",
        "api.example.com",
        "d.test",
    ] {
        ops.push(1);
        put_field(&mut ops, name.as_bytes());
    }
    for index in [2u16, 3, 4, 0, 1, 9] {
        ops.push(2);
        ops.extend_from_slice(&index.to_le_bytes());
    }
    for addr in [
        [127u8, 0, 0, 1],
        [198, 18, 0, 2],
        [10, 1, 2, 3],
        [8, 8, 8, 8],
        [169, 254, 169, 254],
    ] {
        ops.push(3);
        let mut raw = [0u8; 16];
        raw[..4].copy_from_slice(&addr);
        ops.extend_from_slice(&raw);
    }
    for (port, name) in [
        (443u16, "a.example.com"),
        (80, "a.example.com"),
        (1, "example.com"),
    ] {
        ops.push(4);
        ops.extend_from_slice(&port.to_le_bytes());
        put_field(&mut ops, name.as_bytes());
    }
    s.write("destinations", "mixed", &ops)?;
    Ok(())
}

fn header(name: &[u8], kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    let raw = &mut h.as_old_mut().name;
    raw[..name.len()].copy_from_slice(name);
    h.set_cksum();
    h
}

fn link(name: &[u8], kind: tar::EntryType, target: &[u8]) -> tar::Header {
    let mut h = header(name, kind, 0o777, 0);
    let raw = &mut h.as_old_mut().linkname;
    raw[..target.len()].copy_from_slice(target);
    h.set_cksum();
    h
}

fn tar_of(entries: &[(tar::Header, &[u8])]) -> Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    for (h, data) in entries {
        b.append(h, *data)?;
    }
    Ok(b.into_inner()?)
}

fn tar_extract(s: &Seeds) -> Result {
    use tar::EntryType::{Directory, Link, Regular, Symlink};
    let t = "tar_extract";
    let put = |name: &str, setup: u8, tar: Vec<u8>| s.write(t, name, &cat(&[&[setup], &tar]));
    put(
        "tree",
        0,
        tar_of(&[
            (header(b"sub/", Directory, 0o755, 0), b""),
            (header(b"sub/run.sh", Regular, 0o751, 4), b"echo"),
            (link(b"link", Symlink, b"sub/run.sh"), b""),
            (link(b"hard", Link, b"sub/run.sh"), b""),
        ])?,
    )?;
    put(
        "escaping",
        0,
        tar_of(&[(header(b"../evil", Regular, 0o644, 1), b"x")])?,
    )?;
    put(
        "absolute",
        0,
        tar_of(&[(header(b"/tmp/evil", Regular, 0o644, 1), b"x")])?,
    )?;
    put(
        "dotdot_inside",
        0,
        tar_of(&[(header(b"a/../../evil", Regular, 0o644, 1), b"x")])?,
    )?;
    put(
        "through_symlink",
        1,
        tar_of(&[(header(b"out/evil", Regular, 0o644, 1), b"x")])?,
    )?;
    put(
        "symlink_then_file",
        0,
        tar_of(&[
            (link(b"s", Symlink, b"../outside"), b""),
            (header(b"s/canary", Regular, 0o644, 1), b"x"),
        ])?,
    )?;
    put(
        "hardlink_out",
        1,
        tar_of(&[
            (link(b"h", Link, b"out/canary"), b""),
            (header(b"h", Regular, 0o644, 1), b"x"),
        ])?,
    )?;
    put(
        "setuid",
        2,
        tar_of(&[
            (header(b"d/tool", Regular, 0o4755, 2), b"#!"),
            (header(b"d/shared/", Directory, 0o2775, 0), b""),
        ])?,
    )?;
    // A long name (GNU 'L' entry) and a pax header, as tar::Builder writes them.
    let mut b = tar::Builder::new(Vec::new());
    let long = format!("{}/file", "d".repeat(120));
    let mut h = tar::Header::new_gnu();
    h.set_size(3);
    h.set_mode(0o644);
    b.append_data(&mut h, &long, &b"abc"[..])?;
    b.append_pax_extensions([("path", &b"pax/named"[..])])?;
    let mut h = tar::Header::new_ustar();
    h.set_size(2);
    h.set_mode(0o600);
    b.append_data(&mut h, "ustar/file", &b"hi"[..])?;
    put("long_names", 0, b.into_inner()?)?;
    Ok(())
}

fn agent_files(s: &Seeds) -> Result {
    let t = "agent_files";
    let change =
        |kind: v1::ChangeKind, path: &str, file_type: v1::FileType, size, previous_size| {
            v1::FileChange {
                kind: kind.into(),
                path: path.into(),
                r#type: file_type.into(),
                size,
                previous_size,
                mtime_unix_nanos: 1_000_000_000,
            }
        };
    let chunks = [
        v1::TreeChangesChunk {
            changes: vec![
                change(
                    v1::ChangeKind::Created,
                    "/tmp/out",
                    v1::FileType::Directory,
                    60,
                    0,
                ),
                change(
                    v1::ChangeKind::Created,
                    "/tmp/out/a.txt",
                    v1::FileType::File,
                    12,
                    0,
                ),
            ],
            summary: None,
        },
        v1::TreeChangesChunk {
            changes: vec![
                change(
                    v1::ChangeKind::Modified,
                    "/root/data",
                    v1::FileType::File,
                    20,
                    10,
                ),
                change(
                    v1::ChangeKind::Deleted,
                    "/tmp/old",
                    v1::FileType::Symlink,
                    3,
                    3,
                ),
            ],
            summary: Some(v1::TreeChangesSummary {
                truncated: true,
                scanned: 9,
                reported: 4,
            }),
        },
    ];
    let mut out = Vec::new();
    for chunk in &chunks {
        chunk.encode_length_delimited(&mut out)?;
    }
    // Mode 0: asked for the maximum; mode 4 << 2: asked for 10.
    s.write(t, "changes", &cat(&[&[0], &out]))?;
    s.write(t, "changes_asked_3", &cat(&[&[3 << 2], &out]))?;
    let mut infos = Vec::new();
    for (path, file_type, nanos, target) in [
        (
            "/tmp/a",
            v1::FileType::File,
            1_700_000_000_000_000_000i64,
            "",
        ),
        ("/tmp/l", v1::FileType::Symlink, -5, "/etc/passwd"),
        ("/dev/null", v1::FileType::Other, i64::MIN, ""),
    ] {
        v1::FileInfo {
            path: path.into(),
            r#type: file_type.into(),
            size: 42,
            mode: 0o4755,
            uid: 0,
            gid: 0,
            mtime_unix_nanos: nanos,
            symlink_target: target.into(),
        }
        .encode_length_delimited(&mut infos)?;
    }
    s.write(t, "file_info", &cat(&[&[2], &infos]))?;
    let mut events = Vec::new();
    for (kind, cookie) in [
        (v1::WatchEventKind::Create, 0),
        (v1::WatchEventKind::RenameFrom, 7),
        (v1::WatchEventKind::Unspecified, 0),
    ] {
        v1::WatchEvent {
            kind: kind.into(),
            path: "/tmp/w".into(),
            is_dir: false,
            cookie,
        }
        .encode_length_delimited(&mut events)?;
    }
    s.write(t, "watch_events", &cat(&[&[3], &events]))?;
    Ok(())
}

fn template_store(s: &Seeds) -> Result {
    let file = |path: &str| -> Result<FileId> { Ok(FileId::of(Path::new(path))?) };
    let inputs = TemplateInputs {
        format: TEMPLATE_FORMAT,
        airlock_version: "0.1.0".into(),
        qemu: file("/bin/sh")?,
        kernel: file("/etc/os-release")?,
        initramfs: file("/etc/hostname")?,
        image: None,
        memory_mib: 256,
        vcpus: 1,
        accel: "tcg".into(),
        cpu: "max".into(),
        kernel_cmdline: "console=ttyS0".into(),
        serial_ports: vec!["port0".into()],
    };
    let state = b"QEVM state".to_vec();
    let meta = TemplateMeta {
        key: "@KEY@".into(),
        inputs,
        agent_version: "0.1.0".into(),
        created_unix_secs: 1,
        memory_bytes: 2 * 4096,
        state_bytes: state.len() as u64,
        state_sha256: "@SHA@".into(),
    };
    let json = serde_json::to_vec_pretty(&meta)?;
    let t = "template_store";
    s.write(t, "good", &template_input::encode(2, &state, &json))?;
    s.write(t, "memory_short", &template_input::encode(1, &state, &json))?;
    let other = String::from_utf8(json.clone())?.replace("@KEY@", "another-key");
    s.write(
        t,
        "other_key",
        &template_input::encode(2, &state, other.as_bytes()),
    )?;
    s.write(
        t,
        "not_json",
        &template_input::encode(2, &state, b"{\"key\": \"@KEY@\""),
    )?;
    Ok(())
}

fn saved_file(s: &Seeds) -> Result {
    let record = |generations: Vec<u64>| SavedRecord {
        id: "@ID@".into(),
        vm: SavedVm {
            accel: "tcg".into(),
            cpu: Some("max".into()),
            memory_mib: 256,
            vcpus: 1,
            kernel: "/var/cache/airlock/kernel/vmlinuz".into(),
            initramfs: "/var/cache/airlock/initramfs.cpio".into(),
            kernel_cmdline: "console=ttyS0".into(),
            disks: vec![airlock::saved::SavedDisk {
                id: "root".into(),
                path: "/var/cache/airlock/images/default.ext4".into(),
                read_only: true,
            }],
            serial_ports: vec![("port0".into(), "/tmp/port0.sock".into())],
        },
        agent_version: "0.1.0".into(),
        protocol_revision: 7,
        workspace: None,
        usage: SavedUsage::default(),
        generations,
    };
    let header = |qemu: &str, stream_bytes: u64| -> Result<Vec<u8>> {
        Ok(serde_json::to_vec(&SnapshotHeader {
            format: SNAPSHOT_FORMAT,
            qemu_version: qemu.into(),
            stream_bytes,
            memory_mib: 256,
            sandbox_id: "@ID@".into(),
            created_unix_secs: 1,
        })?)
    };
    let snap = |generation, how, header_json: Vec<u8>, stream_len, extra| Snapshot {
        generation,
        how,
        header_json,
        stream_len,
        extra,
    };
    let t = "saved_file";
    let good = serde_json::to_vec_pretty(&record(vec![1, 2]))?;
    s.write(
        t,
        "two_good",
        &saved_input::encode(
            &good,
            &[
                snap(1, 0, header(saved_input::QEMU, 11)?, 11, 0),
                snap(2, 0, header(saved_input::QEMU, 5)?, 5, 0),
            ],
        ),
    )?;
    s.write(
        t,
        "newest_truncated",
        &saved_input::encode(
            &good,
            &[
                snap(1, 0, header(saved_input::QEMU, 11)?, 11, 0),
                snap(2, 3, header(saved_input::QEMU, 500)?, 500, 4200),
            ],
        ),
    )?;
    s.write(
        t,
        "other_qemu",
        &saved_input::encode(
            &good,
            &[
                snap(1, 0, header(saved_input::QEMU, 3)?, 3, 0),
                snap(2, 0, header("8.2.0", 3)?, 3, 0),
            ],
        ),
    )?;
    s.write(
        t,
        "flipped_header",
        &saved_input::encode(&good, &[snap(2, 1, header(saved_input::QEMU, 3)?, 3, 40)]),
    )?;
    s.write(
        t,
        "raw_qemu_stream",
        &saved_input::encode(
            &good,
            &[snap(
                2,
                2,
                b"QEVM\0\0\0\x03 a raw QEMU stream".to_vec(),
                0,
                0,
            )],
        ),
    )?;
    let none = serde_json::to_vec(&record(vec![]))?;
    s.write(t, "no_generation", &saved_input::encode(&none, &[]))?;
    s.write(
        t,
        "not_json",
        &saved_input::encode(b"{\"id\": \"@ID@\"", &[]),
    )?;
    Ok(())
}

/// Create requests as the SDKs and the CLI send them, the bad fields
/// `server/tests/requests.rs` sends, and creates from a snapshot as
/// `service/create/snapshot.rs` tests them (the fixture's `web`, an
/// unknown name, one with an image, one of another size).
fn api_create(s: &Seeds) -> Result {
    use airlock_api::v1::{CreateSandboxRequest, Idle, IdlePolicy, Secret};
    use prost::Message;
    let t = "api_create";
    let seeds = [
        ("default", CreateSandboxRequest::default()),
        (
            "busybox_small",
            CreateSandboxRequest {
                no_image: true,
                memory_mib: 256,
                vcpus: 2,
                timeout_secs: Some(60),
                ..CreateSandboxRequest::default()
            },
        ),
        (
            "labels_envs_idle",
            CreateSandboxRequest {
                metadata: [("team".into(), "a".into())].into(),
                envs: [("MODE".into(), "test".into())].into(),
                idle: Some(Idle {
                    timeout_secs: 30,
                    policy: IdlePolicy::PauseToDisk.into(),
                }),
                ..CreateSandboxRequest::default()
            },
        ),
        (
            "network",
            CreateSandboxRequest {
                allow_net: vec!["api.example.com:443".into(), "10.0.0.0/8".into()],
                secrets: vec![Secret {
                    name: "TOKEN".into(),
                    value: "s3cret".into(),
                    hosts: vec!["api.example.com".into()],
                }],
                ..CreateSandboxRequest::default()
            },
        ),
        (
            "workspace",
            CreateSandboxRequest {
                workspace: "project".into(),
                ..CreateSandboxRequest::default()
            },
        ),
        (
            "workspace_escape",
            CreateSandboxRequest {
                workspace: "../escape".into(),
                ..CreateSandboxRequest::default()
            },
        ),
        (
            "owner_only",
            CreateSandboxRequest {
                timeout_secs: Some(0),
                workspace: "/srv/disk.ext4".into(),
                ..CreateSandboxRequest::default()
            },
        ),
        (
            "not_a_certificate",
            CreateSandboxRequest {
                ca_certs: vec![
                    "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into(),
                ],
                template: "python".into(),
                ..CreateSandboxRequest::default()
            },
        ),
        (
            "snapshot",
            CreateSandboxRequest {
                snapshot: SNAPSHOT.into(),
                timeout_secs: Some(60),
                ..CreateSandboxRequest::default()
            },
        ),
        (
            "snapshot_same_size",
            CreateSandboxRequest {
                snapshot: SNAPSHOT.into(),
                memory_mib: SNAPSHOT_MEMORY_MIB,
                vcpus: SNAPSHOT_VCPUS,
                metadata: [("from".into(), SNAPSHOT.into())].into(),
                ..CreateSandboxRequest::default()
            },
        ),
        (
            "snapshot_other_size",
            CreateSandboxRequest {
                snapshot: SNAPSHOT.into(),
                memory_mib: SNAPSHOT_MEMORY_MIB * 2,
                ..CreateSandboxRequest::default()
            },
        ),
        (
            "snapshot_with_image",
            CreateSandboxRequest {
                snapshot: SNAPSHOT.into(),
                image: "default".into(),
                ..CreateSandboxRequest::default()
            },
        ),
        (
            "snapshot_unknown",
            CreateSandboxRequest {
                snapshot: "missing".into(),
                ..CreateSandboxRequest::default()
            },
        ),
        (
            "snapshot_escape",
            CreateSandboxRequest {
                snapshot: "../x".into(),
                ..CreateSandboxRequest::default()
            },
        ),
    ];
    for (name, request) in seeds {
        s.write(t, name, &request.encode_to_vec())?;
    }
    Ok(())
}

/// E2B create bodies as `server/src/e2b/control/create.rs` tests them, and
/// as the E2B SDK sends one (`web` is the target's one server template).
fn e2b_create(s: &Seeds) -> Result {
    let t = "e2b_create";
    let bodies: [(&str, &[u8]); 13] = [
        ("base", br#"{"templateID":"base"}"#),
        ("template_timeout", br#"{"templateID":"web","timeout":9}"#),
        ("image", br#"{"templateID":"python"}"#),
        ("no_template", b"{}"),
        ("zero_timeout", br#"{"templateID":"base","timeout":0}"#),
        (
            "internet",
            br#"{"templateID":"base","allow_internet_access":true}"#,
        ),
        (
            "allow_out",
            br#"{"templateID":"base","network":{"allowOut":["example.com"],"denyOut":["0.0.0.0/0"]}}"#,
        ),
        (
            "allow_out_no_internet",
            br#"{"templateID":"base","allow_internet_access":false,"network":{"allowOut":["10.0.0.0/8:5432"]}}"#,
        ),
        (
            "deny_out",
            br#"{"templateID":"base","network":{"denyOut":["10.0.0.0/8"]}}"#,
        ),
        (
            "auto_pause",
            br#"{"templateID":"base","timeout":60,"autoPause":true}"#,
        ),
        (
            "auto_resume_off",
            br#"{"templateID":"web","autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":false}}"#,
        ),
        ("mcp", br#"{"templateID":"base","mcp":{"x":{}}}"#),
        (
            "sdk",
            br#"{"templateID":"base","timeout":300,"secure":true,"allow_internet_access":true,"metadata":{"team":"a"},"envVars":{"MODE":"test"},"autoPause":false,"network":{"allowPublicTraffic":true}}"#,
        ),
    ];
    for (name, body) in bodies {
        s.write(t, name, body)?;
    }
    Ok(())
}

/// Client streams as `server/src/e2b/connect/` tests them (`envelope.rs`,
/// `read.rs`): `[how the stream is cut: u8][message bound: u8][stream]`.
fn connect_envelopes(s: &Seeds) -> Result {
    use airlock_server::fuzzing::e2b::encode;
    const END_STREAM: u8 = 0x02;
    const COMPRESSED: u8 = 0x01;
    let stream = |parts: &[(u8, &[u8])]| {
        let mut out = Vec::new();
        for (flags, message) in parts {
            out.extend_from_slice(&encode(*flags, message));
        }
        out
    };
    let t = "connect_envelopes";
    let three = stream(&[(0, br#"{"a":1}"#), (0, b""), (END_STREAM, b"{}")]);
    s.write(t, "three_whole", &cat(&[&[0, 255], &three]))?;
    s.write(t, "three_split", &cat(&[&[1, 255], &three]))?;
    let client = stream(&[
        (0, br#"{"pid": 1}"#),
        (0, br#"{"tag": "x"}"#),
        (END_STREAM, b"{}"),
    ]);
    s.write(t, "client_stream", &cat(&[&[7, 64], &client]))?;
    s.write(
        t,
        "malformed_then_cut",
        &cat(&[&[3, 64], &stream(&[(0, b"{nope")]), &[0, 0]]),
    )?;
    s.write(t, "cut_header", &[0, 64, 0, 0, 0])?;
    s.write(
        t,
        "past_the_bound",
        &[0, 4, 0, 0, 0, 0, 5, b'h', b'e', b'l', b'l', b'o'],
    )?;
    s.write(
        t,
        "compressed",
        &cat(&[&[0, 4], &stream(&[(COMPRESSED, b"x")])]),
    )?;
    s.write(
        t,
        "end_with_error",
        &cat(&[
            &[5, 255],
            &stream(&[(
                END_STREAM,
                br#"{"error":{"code":"not_found","message":"no process 3"}}"#,
            )]),
        ]),
    )?;
    Ok(())
}
