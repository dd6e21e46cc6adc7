//! Our Files service's [`FileInfo`](api::FileInfo) as envd's `EntryInfo`:
//! type, size, mode and its `ls`-style permissions, owner and group by
//! name, modification time, a symlink's target.

use airlock_api::v1::{self as api, FileType as OurType};
use airlock_e2b_wire::filesystem::{EntryInfo, FileType};

use super::names::Names;

/// `info` as envd describes an entry.
pub fn entry(info: &api::FileInfo, names: &Names) -> EntryInfo {
    let kind = OurType::try_from(info.r#type).unwrap_or(OurType::Unspecified);
    let (wire_type, letter) = match kind {
        OurType::File => (FileType::File, '-'),
        OurType::Directory => (FileType::Directory, 'd'),
        OurType::Symlink => (FileType::Symlink, 'L'),
        // A device, socket or pipe: E2B's SDKs skip an unknown type.
        OurType::Other | OurType::Unspecified => (FileType::Unspecified, '?'),
    };
    let symlink = kind == OurType::Symlink;
    EntryInfo {
        name: info.name.clone(),
        r#type: wire_type.into(),
        path: info.path.clone(),
        size: i64::try_from(info.size).unwrap_or(i64::MAX),
        mode: info.mode & 0o7777,
        permissions: permissions(letter, info.mode),
        owner: names.user(info.uid),
        group: names.group(info.gid),
        modified_time: Some(pbjson_types::Timestamp {
            seconds: info.modified_at_ms.div_euclid(1000),
            nanos: (info.modified_at_ms.rem_euclid(1000) * 1_000_000) as i32,
        }),
        symlink_target: symlink.then(|| info.symlink_target.clone()),
        metadata: Default::default(),
        is_symlink: symlink,
    }
}

/// `ls -l`'s permission text for `mode`, after the type `letter` (as Go's
/// `FileMode.String` writes it, which envd answers).
fn permissions(letter: char, mode: u32) -> String {
    let mut text = String::with_capacity(10);
    text.push(letter);
    for (shift, special, set) in [(6, 0o4000, 's'), (3, 0o2000, 's'), (0, 0o1000, 't')] {
        let bits = (mode >> shift) & 0o7;
        text.push(if bits & 4 != 0 { 'r' } else { '-' });
        text.push(if bits & 2 != 0 { 'w' } else { '-' });
        text.push(match (bits & 1 != 0, mode & special != 0) {
            (true, true) => set,
            (false, true) => set.to_ascii_uppercase(),
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_read_as_ls_writes_them() {
        assert_eq!(permissions('-', 0o644), "-rw-r--r--");
        assert_eq!(permissions('d', 0o755), "drwxr-xr-x");
        assert_eq!(permissions('-', 0o4755), "-rwsr-xr-x");
        assert_eq!(permissions('d', 0o1777), "drwxrwxrwt");
    }

    #[test]
    fn a_file_and_a_link() {
        let names = Names::default();
        let file = api::FileInfo {
            path: "/home/user/a.txt".into(),
            name: "a.txt".into(),
            r#type: OurType::File.into(),
            size: 3,
            mode: 0o644,
            uid: 0,
            gid: 0,
            modified_at_ms: 1_500,
            symlink_target: String::new(),
        };
        let entry = entry(&file, &names);
        assert_eq!(entry.r#type, i32::from(FileType::File));
        assert_eq!(entry.owner, "root");
        assert_eq!(entry.symlink_target, None);
        let time = entry.modified_time.unwrap();
        assert_eq!((time.seconds, time.nanos), (1, 500_000_000));
        let link = api::FileInfo {
            r#type: OurType::Symlink.into(),
            symlink_target: "/tmp".into(),
            ..file
        };
        let entry = super::entry(&link, &names);
        assert!(entry.is_symlink);
        assert_eq!(entry.symlink_target.as_deref(), Some("/tmp"));
    }
}
