//! Who runs a program: `StartRequest.user` resolved against the guest's
//! `/etc/passwd` and `/etc/group`.
//!
//! Accepted forms are `name`, `uid`, `name:group`, `uid:gid` (and mixes such
//! as `name:gid`). A name must exist; a bare number need not, in which case
//! the group defaults to the same number and there is no home directory.
//! Supplementary groups are the primary group plus every group in
//! `/etc/group` that lists the user's name, as `login` would set them.

use std::path::Path;

use super::ProcessError;

/// The user database files.
pub const PASSWD: &str = "/etc/passwd";
/// The group database file.
pub const GROUP: &str = "/etc/group";

/// The identity a program runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups, the primary one included.
    pub groups: Vec<u32>,
    /// The login name, when the user is in `/etc/passwd`.
    pub name: Option<String>,
    /// The home directory, when the user is in `/etc/passwd`.
    pub home: Option<String>,
}

/// One line of `/etc/passwd`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PasswdEntry<'a> {
    name: &'a str,
    uid: u32,
    gid: u32,
    home: &'a str,
}

/// One line of `/etc/group`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct GroupEntry<'a> {
    name: &'a str,
    gid: u32,
    members: Vec<&'a str>,
}

/// Resolves `spec` against the guest's databases. An empty spec means
/// "the agent's own user" and resolves to `None`.
pub fn resolve(spec: &str) -> Result<Option<Credentials>, ProcessError> {
    if spec.is_empty() {
        return Ok(None);
    }
    let passwd = read_db(Path::new(PASSWD));
    let group = read_db(Path::new(GROUP));
    resolve_in(spec, &passwd, &group).map(Some)
}

/// A database file's text; a missing or unreadable file is an empty
/// database (a minimal guest may have none), so names will not resolve.
fn read_db(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => {
            tracing::debug!(path = %path.display(), error = %e, "user database unreadable");
            String::new()
        }
    }
}

/// Resolves `spec` against the given database texts.
fn resolve_in(spec: &str, passwd: &str, group: &str) -> Result<Credentials, ProcessError> {
    let bad = || ProcessError::BadUser(spec.to_owned());
    let (user_part, group_part) = match spec.split_once(':') {
        Some((u, g)) if !u.is_empty() && !g.is_empty() && !g.contains(':') => (u, Some(g)),
        Some(_) => return Err(bad()),
        None => (spec, None),
    };
    let users: Vec<PasswdEntry<'_>> = passwd.lines().filter_map(parse_passwd).collect();
    let groups: Vec<GroupEntry<'_>> = group.lines().filter_map(parse_group).collect();

    let entry = match user_part.parse::<u32>() {
        Ok(uid) => users.iter().find(|u| u.uid == uid).cloned(),
        Err(_) if is_name(user_part) => Some(
            users
                .iter()
                .find(|u| u.name == user_part)
                .cloned()
                .ok_or_else(|| ProcessError::UserNotFound(user_part.to_owned()))?,
        ),
        Err(_) => return Err(bad()),
    };
    let uid = match &entry {
        Some(e) => e.uid,
        None => user_part.parse::<u32>().map_err(|_| bad())?,
    };
    let gid = match group_part {
        None => entry.as_ref().map_or(uid, |e| e.gid),
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) if is_name(g) => groups
                .iter()
                .find(|e| e.name == g)
                .map(|e| e.gid)
                .ok_or_else(|| ProcessError::GroupNotFound(g.to_owned()))?,
            Err(_) => return Err(bad()),
        },
    };
    // (uid_t)-1 is "leave unchanged" to setresuid and setresgid: never a
    // user to run as.
    if uid == u32::MAX || gid == u32::MAX {
        return Err(bad());
    }
    let mut supplementary = vec![gid];
    if let Some(e) = &entry {
        for g in &groups {
            if g.members.contains(&e.name) && !supplementary.contains(&g.gid) {
                supplementary.push(g.gid);
            }
        }
    }
    Ok(Credentials {
        uid,
        gid,
        groups: supplementary,
        name: entry.as_ref().map(|e| e.name.to_owned()),
        home: entry
            .as_ref()
            .filter(|e| !e.home.is_empty())
            .map(|e| e.home.to_owned()),
    })
}

/// A plausible user or group name: no separators, whitespace or controls.
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| !c.is_whitespace() && !c.is_control() && c != ':' && c != ',')
}

fn parse_passwd(line: &str) -> Option<PasswdEntry<'_>> {
    let mut fields = line.split(':');
    let name = fields
        .next()
        .filter(|n| !n.is_empty() && !n.starts_with('#'))?;
    let _password = fields.next()?;
    let uid = fields.next()?.parse().ok()?;
    let gid = fields.next()?.parse().ok()?;
    let _gecos = fields.next()?;
    let home = fields.next()?;
    Some(PasswdEntry {
        name,
        uid,
        gid,
        home,
    })
}

fn parse_group(line: &str) -> Option<GroupEntry<'_>> {
    let mut fields = line.split(':');
    let name = fields
        .next()
        .filter(|n| !n.is_empty() && !n.starts_with('#'))?;
    let _password = fields.next()?;
    let gid = fields.next()?.parse().ok()?;
    let members = fields
        .next()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .collect();
    Some(GroupEntry { name, gid, members })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const PASSWD_TEXT: &str = "\
root:x:0:0:root:/root:/bin/sh
# a comment
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
alice:x:1000:1000:Alice,,,:/home/alice:/bin/bash
broken line
bob:x:1001:100::/home/bob:/bin/sh
";
    const GROUP_TEXT: &str = "\
root:x:0:
users:x:100:alice
alice:x:1000:
docker:x:999:alice,bob
wheel:x:10: bob
";

    fn resolve(spec: &str) -> Result<Credentials, ProcessError> {
        resolve_in(spec, PASSWD_TEXT, GROUP_TEXT)
    }

    #[test]
    fn the_unchanged_id_is_not_a_user() {
        for spec in ["4294967295", "0:4294967295", "alice:4294967295"] {
            assert!(
                matches!(resolve(spec), Err(ProcessError::BadUser(_))),
                "{spec}"
            );
        }
        assert_eq!(resolve("4294967294").unwrap().uid, 4_294_967_294);
    }

    #[test]
    fn name_resolves_with_home_and_supplementary_groups() {
        let c = resolve("alice").unwrap();
        assert_eq!((c.uid, c.gid), (1000, 1000));
        assert_eq!(c.groups, [1000, 100, 999]);
        assert_eq!(c.name.as_deref(), Some("alice"));
        assert_eq!(c.home.as_deref(), Some("/home/alice"));

        let c = resolve("bob").unwrap();
        assert_eq!((c.uid, c.gid), (1001, 100));
        assert_eq!(c.groups, [100, 999, 10]);
    }

    #[test]
    fn known_uid_uses_its_entry() {
        let c = resolve("1000").unwrap();
        assert_eq!(c.name.as_deref(), Some("alice"));
        assert_eq!(c.gid, 1000);
    }

    #[test]
    fn unknown_uid_is_allowed_with_its_own_number_as_group() {
        let c = resolve("4242").unwrap();
        assert_eq!((c.uid, c.gid), (4242, 4242));
        assert_eq!(c.groups, [4242]);
        assert_eq!(c.name, None);
        assert_eq!(c.home, None);
    }

    #[test]
    fn explicit_group_by_name_or_number() {
        let c = resolve("alice:docker").unwrap();
        assert_eq!((c.uid, c.gid), (1000, 999));
        assert_eq!(c.groups, [999, 100]);
        let c = resolve("4242:7").unwrap();
        assert_eq!((c.uid, c.gid), (4242, 7));
        let c = resolve("0:0").unwrap();
        assert_eq!((c.uid, c.gid, c.name.as_deref()), (0, 0, Some("root")));
    }

    #[test]
    fn unknown_names_are_not_found_by_name() {
        let err = resolve("mallory").unwrap_err();
        assert!(matches!(err, ProcessError::UserNotFound(ref n) if n == "mallory"));
        assert!(err.to_string().contains("mallory"), "{err}");
        let err = resolve("alice:nogroup").unwrap_err();
        assert!(matches!(err, ProcessError::GroupNotFound(ref g) if g == "nogroup"));
    }

    #[test]
    fn malformed_specs_are_rejected() {
        for spec in [":", "alice:", ":100", "a:b:c", "al ice", "-1"] {
            let err = resolve(spec).unwrap_err();
            assert!(
                matches!(
                    err,
                    ProcessError::BadUser(_) | ProcessError::UserNotFound(_)
                ),
                "{spec}: {err}"
            );
        }
        assert!(matches!(resolve("a:b:c"), Err(ProcessError::BadUser(_))));
    }

    #[test]
    fn empty_databases_resolve_numbers_only() {
        assert!(resolve_in("1000", "", "").is_ok());
        assert!(matches!(
            resolve_in("root", "", ""),
            Err(ProcessError::UserNotFound(_))
        ));
    }
}
