//! A kernel module's `.modinfo` section: NUL-separated `key=value` strings written by
//! `modpost` (`license=GPL`, `depends=virtio,virtio_ring`, `name=virtio_blk`, ...).
//!
//! Debian's kernel package ships no `modules.dep` (depmod runs at install time), so the
//! `depends=` key read here is the only source of load order; [`crate::depsort`] turns it
//! into one.

use crate::elf::{self, ElfError};

/// The ELF section that holds a module's metadata.
pub const SECTION: &str = ".modinfo";

/// Why a module's metadata could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModinfoError {
    /// The module file is not a readable ELF object.
    #[error("module is not a readable ELF object")]
    Elf(#[source] ElfError),
    /// The module has no `.modinfo` section.
    #[error("module has no .modinfo section")]
    NoSection,
    /// A string in the section is not of the form `key=value`.
    #[error("malformed .modinfo entry at byte {offset}")]
    Malformed {
        /// Offset of the entry within the section.
        offset: usize,
    },
}

/// The parsed `key=value` entries of one module, in section order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModInfo {
    entries: Vec<(String, String)>,
}

impl ModInfo {
    /// Reads the `.modinfo` section of an uncompressed module (`.ko`) file's bytes.
    pub fn from_elf(module: &[u8]) -> Result<Self, ModinfoError> {
        let section = elf::section(module, SECTION)
            .map_err(ModinfoError::Elf)?
            .ok_or(ModinfoError::NoSection)?;
        Self::parse(section)
    }

    /// Parses the raw section bytes. Empty strings (alignment padding) are skipped.
    pub fn parse(section: &[u8]) -> Result<Self, ModinfoError> {
        let mut entries = Vec::new();
        let mut offset = 0;
        for raw in section.split(|&b| b == 0) {
            let start = offset;
            offset += raw.len() + 1;
            if raw.is_empty() {
                continue;
            }
            let eq = raw
                .iter()
                .position(|&b| b == b'=')
                .filter(|&eq| eq > 0)
                .ok_or(ModinfoError::Malformed { offset: start })?;
            let key = std::str::from_utf8(&raw[..eq])
                .map_err(|_| ModinfoError::Malformed { offset: start })?;
            let value = String::from_utf8_lossy(&raw[eq + 1..]);
            entries.push((key.to_owned(), value.into_owned()));
        }
        Ok(Self { entries })
    }

    /// The first value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The module's own name (`name=`), normalised with [`normalize`].
    pub fn name(&self) -> Option<String> {
        self.get("name").map(normalize)
    }

    /// The modules this one needs loaded first (`depends=`), normalised, in listed order.
    pub fn depends(&self) -> Vec<String> {
        self.get("depends")
            .map(|list| {
                list.split(',')
                    .map(str::trim)
                    .filter(|name| !name.is_empty())
                    .map(normalize)
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The kernel treats `-` and `_` in module names alike; this crate always uses `_`.
pub fn normalize(name: &str) -> String {
    name.replace('-', "_")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::tests::object_with_section;

    #[test]
    fn parses_depends_from_a_synthetic_section() -> anyhow::Result<()> {
        let section = b"alias=virtio:d00000002v*\0depends=virtio,virtio_ring\0\0\0\
                        retpoline=Y\0intree=Y\0name=virtio_blk\0vermagic=6.1.0 SMP mod_unload\0";
        let info = ModInfo::parse(section)?;
        assert_eq!(info.depends(), ["virtio", "virtio_ring"]);
        assert_eq!(info.name().as_deref(), Some("virtio_blk"));
        assert_eq!(info.get("vermagic"), Some("6.1.0 SMP mod_unload"));
        Ok(())
    }

    #[test]
    fn empty_depends_means_no_dependencies() -> anyhow::Result<()> {
        assert!(ModInfo::parse(b"depends=\0name=vsock\0")?
            .depends()
            .is_empty());
        assert!(ModInfo::parse(b"name=vsock\0")?.depends().is_empty());
        Ok(())
    }

    #[test]
    fn dashes_in_names_are_normalised() -> anyhow::Result<()> {
        let info = ModInfo::parse(b"depends=crc-t10dif, libcrc32c\0name=amd-uncore\0")?;
        assert_eq!(info.depends(), ["crc_t10dif", "libcrc32c"]);
        assert_eq!(info.name().as_deref(), Some("amd_uncore"));
        Ok(())
    }

    #[test]
    fn entry_without_key_is_an_error() {
        assert!(matches!(
            ModInfo::parse(b"license=GPL\0garbage\0"),
            Err(ModinfoError::Malformed { offset: 12 })
        ));
        assert!(matches!(
            ModInfo::parse(b"=value\0"),
            Err(ModinfoError::Malformed { offset: 0 })
        ));
    }

    #[test]
    fn reads_the_section_out_of_an_elf_module() -> anyhow::Result<()> {
        let ko = object_with_section(
            SECTION,
            b"depends=vsock\0name=vmw_vsock_virtio_transport_common\0",
        )?;
        let info = ModInfo::from_elf(&ko)?;
        assert_eq!(info.depends(), ["vsock"]);
        Ok(())
    }

    #[test]
    fn module_without_modinfo_is_an_error() -> anyhow::Result<()> {
        let ko = object_with_section(".text", b"\xc3")?;
        assert!(matches!(
            ModInfo::from_elf(&ko),
            Err(ModinfoError::NoSection)
        ));
        Ok(())
    }
}
