//! E2B envd's wire types: the messages of the `process.Process` and
//! `filesystem.Filesystem` services (`proto/e2b/envd`), with prost's binary
//! encoding and pbjson's proto3 JSON mapping (serde), the two codecs of
//! the Connect protocol (`application/proto`, `application/json`).
//!
//! The protocol definitions are Airlock's own, written from the wire
//! contract E2B's SDKs speak: names and field numbers are theirs.

#![forbid(unsafe_code)]

/// The binary codec of these types, for users without their own dependency.
pub use prost;

/// `process.Process`: start, attach to, list, signal and feed processes.
pub mod process {
    #![allow(clippy::all, missing_debug_implementations)]
    include!(concat!(env!("OUT_DIR"), "/process.rs"));
    include!(concat!(env!("OUT_DIR"), "/process.serde.rs"));

    /// The service's name in a Connect path (`/process.Process/Start`).
    pub const SERVICE: &str = "process.Process";
}

/// `filesystem.Filesystem`: stat, list, move, remove and watch files.
pub mod filesystem {
    #![allow(clippy::all, missing_debug_implementations)]
    include!(concat!(env!("OUT_DIR"), "/filesystem.rs"));
    include!(concat!(env!("OUT_DIR"), "/filesystem.serde.rs"));

    /// The service's name in a Connect path (`/filesystem.Filesystem/Stat`).
    pub const SERVICE: &str = "filesystem.Filesystem";
}

#[cfg(test)]
mod tests {
    use super::filesystem::{EntryInfo, FileType};
    use super::process::{process_event, ProcessEvent, ProcessSelector, StartRequest};
    use prost::Message;

    #[test]
    fn json_uses_the_camel_case_names_and_base64_bytes() {
        let event = ProcessEvent {
            event: Some(process_event::Event::Data(process_event::DataEvent {
                output: Some(process_event::data_event::Output::Stdout(b"hi\n".to_vec())),
            })),
        };
        let json = serde_json::to_value(&event).expect("encodes");
        assert_eq!(json, serde_json::json!({"data": {"stdout": "aGkK"}}));
        let end = ProcessEvent {
            event: Some(process_event::Event::End(process_event::EndEvent {
                exit_code: 3,
                exited: true,
                status: "exit status 3".into(),
                error: None,
            })),
        };
        let json = serde_json::to_value(&end).expect("encodes");
        assert_eq!(
            json,
            serde_json::json!({"end": {"exitCode": 3, "exited": true, "status": "exit status 3"}})
        );
    }

    #[test]
    fn json_decodes_what_the_sdks_send() {
        let start: StartRequest = serde_json::from_str(
            r#"{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"A":"1"},"cwd":"/tmp"},"stdin":false,"unknownField":1}"#,
        )
        .expect("decodes");
        let process = start.process.expect("a process");
        assert_eq!(process.cmd, "/bin/bash");
        assert_eq!(process.args, ["-l", "-c", "echo hi"]);
        assert_eq!(process.envs.get("A").map(String::as_str), Some("1"));
        assert_eq!(process.cwd.as_deref(), Some("/tmp"));
        assert_eq!(start.stdin, Some(false));
        let selector: ProcessSelector = serde_json::from_str(r#"{"pid":42}"#).expect("decodes");
        assert_eq!(
            selector.selector,
            Some(super::process::process_selector::Selector::Pid(42))
        );
    }

    #[test]
    fn binary_and_json_agree_on_an_entry() {
        let entry = EntryInfo {
            name: "a.txt".into(),
            r#type: FileType::File as i32,
            path: "/home/user/a.txt".into(),
            size: 5,
            modified_time: Some(pbjson_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 0,
            }),
            ..Default::default()
        };
        let decoded = EntryInfo::decode(entry.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(decoded, entry);
        let json = serde_json::to_value(&entry).expect("encodes");
        assert_eq!(json["type"], "FILE_TYPE_FILE");
        assert_eq!(json["size"], "5");
        assert_eq!(json["modifiedTime"], "2023-11-14T22:13:20+00:00");
    }
}
