//! Owners and groups by name, as envd reports them: from the guest's
//! `/etc/passwd` and `/etc/group` when an entry is not root's (read once
//! per call, through the Files service), else the number.

use std::collections::HashMap;

use tonic::Status;

use crate::e2b::envd::files::user;
use crate::e2b::target::SandboxCall;

/// Names of uids and gids.
#[derive(Debug, Clone, Default)]
pub struct Names {
    users: HashMap<u32, String>,
    groups: HashMap<u32, String>,
}

impl Names {
    /// The names a description of entries owned by `ids` (uid, gid) needs.
    pub async fn for_ids(
        call: &SandboxCall,
        ids: impl Iterator<Item = (u32, u32)>,
    ) -> Result<Self, Status> {
        let mut names = Names::default();
        let (mut users, mut groups) = (false, false);
        for (uid, gid) in ids {
            users |= uid != 0;
            groups |= gid != 0;
        }
        if users {
            names.users = table(&user::read_small(call, "/etc/passwd").await?);
        }
        if groups {
            names.groups = table(&user::read_small(call, "/etc/group").await?);
        }
        Ok(names)
    }

    /// The name of `uid`.
    pub fn user(&self, uid: u32) -> String {
        name(&self.users, uid)
    }

    /// The name of `gid`.
    pub fn group(&self, gid: u32) -> String {
        name(&self.groups, gid)
    }
}

fn name(table: &HashMap<u32, String>, id: u32) -> String {
    match (id, table.get(&id)) {
        (_, Some(name)) => name.clone(),
        (0, None) => "root".into(),
        (id, None) => id.to_string(),
    }
}

/// `NAME:x:ID:...` lines as id to name.
fn table(text: &str) -> HashMap<u32, String> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            let id = fields.nth(1)?.parse().ok()?;
            Some((id, name.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_by_name_or_number() {
        let names = Names {
            users: table("root:x:0:0::/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh"),
            groups: table("root:x:0:\nuser:x:1000:"),
        };
        assert_eq!(names.user(1000), "user");
        assert_eq!(names.group(1000), "user");
        assert_eq!(names.user(0), "root");
        assert_eq!(names.user(42), "42");
    }
}
