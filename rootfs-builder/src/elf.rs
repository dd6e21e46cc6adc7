//! The two questions this crate asks of an ELF file, answered with the `object` crate:
//! the bytes of a named section (a kernel module's `.modinfo`) and the program interpreter
//! (`PT_INTERP`), which tells a dynamically linked binary from a static one.

use object::elf::{FileHeader32, FileHeader64};
use object::read::elf::{FileHeader, ProgramHeader};
use object::{Endianness, FileKind, Object, ObjectSection};

/// Why an ELF file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ElfError {
    /// The bytes are not an ELF file at all.
    #[error("not an ELF file")]
    NotElf,
    /// The file claims to be ELF but its headers are damaged.
    #[error("malformed ELF file")]
    Malformed(#[source] object::read::Error),
}

/// Returns the contents of the section called `name`, or `None` if the file has no such section.
pub fn section<'d>(data: &'d [u8], name: &str) -> Result<Option<&'d [u8]>, ElfError> {
    require_elf(data)?;
    let file = object::File::parse(data).map_err(ElfError::Malformed)?;
    match file.section_by_name(name) {
        Some(section) => section.data().map(Some).map_err(ElfError::Malformed),
        None => Ok(None),
    }
}

/// Returns the program interpreter (`PT_INTERP`, e.g. `/lib64/ld-linux-x86-64.so.2`) of an
/// executable, or `None` for a statically linked one.
pub fn interpreter(data: &[u8]) -> Result<Option<String>, ElfError> {
    match require_elf(data)? {
        FileKind::Elf64 => interpreter_of::<FileHeader64<Endianness>>(data),
        _ => interpreter_of::<FileHeader32<Endianness>>(data),
    }
    .map_err(ElfError::Malformed)
}

fn require_elf(data: &[u8]) -> Result<FileKind, ElfError> {
    match FileKind::parse(data) {
        Ok(kind @ (FileKind::Elf32 | FileKind::Elf64)) => Ok(kind),
        _ => Err(ElfError::NotElf),
    }
}

fn interpreter_of<H: FileHeader<Endian = Endianness>>(
    data: &[u8],
) -> object::read::Result<Option<String>> {
    let header = H::parse(data)?;
    let endian = header.endian()?;
    for program_header in header.program_headers(endian, data)? {
        if let Some(path) = program_header.interpreter(endian, data)? {
            return Ok(Some(String::from_utf8_lossy(path).into_owned()));
        }
    }
    Ok(None)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use object::write;
    use object::{Architecture, BinaryFormat, SectionKind};

    /// A relocatable x86-64 ELF object (the shape of a `.ko`) with one extra section.
    pub(crate) fn object_with_section(name: &str, contents: &[u8]) -> anyhow::Result<Vec<u8>> {
        let mut obj = write::Object::new(
            BinaryFormat::Elf,
            Architecture::X86_64,
            object::Endianness::Little,
        );
        let id = obj.add_section(Vec::new(), name.as_bytes().to_vec(), SectionKind::Other);
        obj.append_section_data(id, contents, 1);
        Ok(obj.write()?)
    }

    #[test]
    fn reads_a_named_section() -> anyhow::Result<()> {
        let elf = object_with_section(".modinfo", b"license=GPL\0")?;
        assert_eq!(section(&elf, ".modinfo")?, Some(&b"license=GPL\0"[..]));
        assert_eq!(section(&elf, ".missing")?, None);
        Ok(())
    }

    #[test]
    fn rejects_non_elf_input() {
        assert!(matches!(
            section(b"#!/bin/sh\n", ".modinfo"),
            Err(ElfError::NotElf)
        ));
        assert!(matches!(interpreter(b""), Err(ElfError::NotElf)));
    }

    #[test]
    fn relocatable_object_has_no_interpreter() -> anyhow::Result<()> {
        let elf = object_with_section(".text", b"\x90")?;
        assert_eq!(interpreter(&elf)?, None);
        Ok(())
    }

    #[test]
    fn host_dynamic_binary_has_an_interpreter() -> anyhow::Result<()> {
        // Debian's coreutils `true` is dynamically linked on every Debian host.
        let interp = interpreter(&std::fs::read("/bin/true")?)?.unwrap_or_default();
        assert!(interp.contains("ld-linux"), "interpreter was {interp:?}");
        Ok(())
    }
}
