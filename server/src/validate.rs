//! Checks of what a request carries, each refusing with `INVALID_ARGUMENT`
//! naming the field (see [`airlock_api::limits`] for the bounds).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tonic::Status;

use airlock_api::limits;
use airlock_api::reason::invalid;

/// A sandbox id: what the library names state directories with.
pub fn sandbox_id(field: &str, id: &str) -> Result<(), Status> {
    if id.is_empty() {
        return Err(invalid(field, "missing"));
    }
    if id.len() > limits::MAX_ID_BYTES
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        || id.starts_with('.')
    {
        return Err(invalid(field, "not a sandbox id"));
    }
    Ok(())
}

/// One guest port: 1 to 65535.
pub fn port(field: &str, port: u32) -> Result<u16, Status> {
    u16::try_from(port)
        .ok()
        .filter(|&p| p != 0)
        .ok_or_else(|| invalid(field, format!("{port} is not a TCP port (1 to 65535)")))
}

/// Guest ports (at most `MAX_PUBLIC_PORTS`), each 1 to 65535, without
/// repeats.
pub fn ports(field: &str, ports: &[u32]) -> Result<Vec<u16>, Status> {
    count(field, ports, limits::MAX_PUBLIC_PORTS)?;
    let mut checked = Vec::with_capacity(ports.len());
    for &p in ports {
        let p = port(field, p)?;
        if !checked.contains(&p) {
            checked.push(p);
        }
    }
    Ok(checked)
}

/// A name from the server's stores (image, template, workspace, context,
/// tag): 1 to `MAX_NAME_BYTES` of letters, digits, `.`, `_`, `-`, not
/// starting with `.`.
pub fn name(field: &str, value: &str) -> Result<(), Status> {
    if value.is_empty() {
        return Err(invalid(field, "missing"));
    }
    if value.len() > limits::MAX_NAME_BYTES
        || value.starts_with('.')
        || !value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(invalid(
            field,
            format!(
                "{value:?} is not a name: 1 to {} letters, digits, '.', '_' or '-'",
                limits::MAX_NAME_BYTES
            ),
        ));
    }
    Ok(())
}

/// A guest path: absolute, no NUL, bounded.
pub fn guest_path(field: &str, path: &str) -> Result<(), Status> {
    if path.is_empty() {
        return Err(invalid(field, "missing"));
    }
    if !path.starts_with('/') {
        return Err(invalid(field, format!("{path:?} is not absolute")));
    }
    if path.len() > limits::MAX_PATH_BYTES {
        return Err(invalid(
            field,
            format!("longer than {} bytes", limits::MAX_PATH_BYTES),
        ));
    }
    if path.contains('\0') {
        return Err(invalid(field, "contains NUL"));
    }
    Ok(())
}

/// Labels: bounded in count and size, keys of a safe alphabet.
pub fn labels(field: &str, labels: &HashMap<String, String>) -> Result<(), Status> {
    if labels.len() > limits::MAX_LABELS {
        return Err(invalid(
            field,
            format!("at most {} labels", limits::MAX_LABELS),
        ));
    }
    for (key, value) in labels {
        if key.is_empty()
            || key.len() > limits::MAX_LABEL_KEY_BYTES
            || !key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/'))
        {
            return Err(invalid(
                field,
                format!(
                    "label key {key:?}: 1 to {} letters, digits, '.', '_', '-' or '/'",
                    limits::MAX_LABEL_KEY_BYTES
                ),
            ));
        }
        if value.len() > limits::MAX_LABEL_VALUE_BYTES {
            return Err(invalid(
                field,
                format!(
                    "label {key:?}: value longer than {} bytes",
                    limits::MAX_LABEL_VALUE_BYTES
                ),
            ));
        }
    }
    Ok(())
}

/// Whether `name` can name an environment variable.
pub fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && name.len() <= limits::MAX_NAME_BYTES
}

/// Environment variables: valid names, bounded values, no NUL.
pub fn envs(
    field: &str,
    envs: &HashMap<String, String>,
) -> Result<BTreeMap<String, String>, Status> {
    if envs.len() > limits::MAX_ENVS {
        return Err(invalid(
            field,
            format!("at most {} variables", limits::MAX_ENVS),
        ));
    }
    for (key, value) in envs {
        if !is_env_name(key) {
            return Err(invalid(
                field,
                format!("{key:?} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"),
            ));
        }
        if value.len() > limits::MAX_ENV_VALUE_BYTES || value.contains('\0') {
            return Err(invalid(
                field,
                format!(
                    "{key}: the value has NUL or is longer than {} bytes",
                    limits::MAX_ENV_VALUE_BYTES
                ),
            ));
        }
    }
    Ok(envs.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

/// Seconds as a duration: finite, positive, at most `max`.
pub fn seconds(field: &str, secs: f64, max: u64) -> Result<Duration, Status> {
    #[allow(clippy::cast_precision_loss)]
    let ceiling = max as f64;
    if !secs.is_finite() || secs <= 0.0 || secs > ceiling {
        return Err(invalid(
            field,
            format!("{secs} is not a number of seconds in (0, {max}]"),
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A number within `min..=max`.
pub fn within<T: PartialOrd + std::fmt::Display + Copy>(
    field: &str,
    value: T,
    min: T,
    max: T,
) -> Result<T, Status> {
    if value < min || value > max {
        return Err(invalid(
            field,
            format!("{value} is not within {min} to {max}"),
        ));
    }
    Ok(value)
}

/// At most `max` items.
pub fn count<T>(field: &str, items: &[T], max: usize) -> Result<(), Status> {
    if items.len() > max {
        return Err(invalid(field, format!("at most {max}")));
    }
    Ok(())
}

/// A guest user: a name or a numeric id, optionally with `:group`. An id
/// is at most 4294967294: 4294967295 is `(uid_t)-1`, which the kernel reads
/// as "leave unchanged", never as a user.
pub fn user(field: &str, user: &str) -> Result<(), Status> {
    if user.len() > limits::MAX_NAME_BYTES || user.contains('\0') {
        return Err(invalid(field, "not a user name or uid"));
    }
    for part in user.split(':') {
        let numeric = !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
        if numeric && part.parse::<u32>().map_or(true, |id| id == u32::MAX) {
            return Err(invalid(
                field,
                format!("{part} is not a uid or gid (0 to {})", u32::MAX - 1),
            ));
        }
    }
    Ok(())
}

/// Bytes of data in one message.
pub fn chunk(field: &str, data: &[u8]) -> Result<(), Status> {
    if data.len() > limits::MAX_CHUNK_BYTES {
        return Err(invalid(
            field,
            format!("more than {} bytes in one message", limits::MAX_CHUNK_BYTES),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_api::reason::field_of;

    #[test]
    fn each_check_names_its_field() {
        let refused = [
            sandbox_id("sandbox_id", "").unwrap_err(),
            sandbox_id("sandbox_id", "../etc").unwrap_err(),
            sandbox_id("sandbox_id", &"a".repeat(200)).unwrap_err(),
            name("image", "a b").unwrap_err(),
            guest_path("path", "relative").unwrap_err(),
            guest_path("path", "/a\0b").unwrap_err(),
            seconds("timeout_secs", -1.0, 10).unwrap_err(),
            seconds("timeout_secs", f64::NAN, 10).unwrap_err(),
            seconds("timeout_secs", 11.0, 10).unwrap_err(),
            within("vcpus", 65u32, 1, 64).unwrap_err(),
        ];
        let fields = [
            "sandbox_id",
            "sandbox_id",
            "sandbox_id",
            "image",
            "path",
            "path",
            "timeout_secs",
            "timeout_secs",
            "timeout_secs",
            "vcpus",
        ];
        for (status, field) in refused.iter().zip(fields) {
            assert_eq!(status.code(), tonic::Code::InvalidArgument);
            assert_eq!(field_of(status), Some(field), "{status:?}");
            assert!(status.message().starts_with(field), "{status:?}");
        }
        for spec in ["4294967295", "0:4294967295", "99999999999"] {
            assert_eq!(
                field_of(&user("start.user", spec).unwrap_err()),
                Some("start.user")
            );
        }
        assert!(user("start.user", "4294967294:nogroup").is_ok());
        assert!(sandbox_id("sandbox_id", "sandbox-Ab12").is_ok());
        assert!(guest_path("path", "/tmp/x").is_ok());
    }

    #[test]
    fn labels_and_envs_are_bounded() {
        let many: HashMap<String, String> = (0..=limits::MAX_LABELS)
            .map(|i| (format!("k{i}"), String::new()))
            .collect();
        assert!(labels("metadata", &many).is_err());
        let bad_key: HashMap<String, String> = [("a b".into(), "v".into())].into();
        assert!(labels("metadata", &bad_key).is_err());
        let long: HashMap<String, String> =
            [("k".into(), "v".repeat(limits::MAX_LABEL_VALUE_BYTES + 1))].into();
        assert!(labels("metadata", &long).is_err());
        let ok: HashMap<String, String> = [("team/x.y".into(), "v".into())].into();
        assert!(labels("metadata", &ok).is_ok());
        let bad_env: HashMap<String, String> = [("1A".into(), "v".into())].into();
        assert_eq!(field_of(&envs("envs", &bad_env).unwrap_err()), Some("envs"));
        let nul: HashMap<String, String> = [("A".into(), "a\0".into())].into();
        assert!(envs("envs", &nul).is_err());
    }
}
