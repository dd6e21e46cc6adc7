//! Builds the two boot artifacts of an Airlock guest from Debian's packages. This first
//! part reads kernel modules: [`elf`] (sections and interpreter), [`modinfo`] (the
//! `.modinfo` key=value strings), [`decompress`] (`.ko.xz`/`.ko.zst`/`.ko.gz`) and
//! [`depsort`] (load order from `depends=`).

#![forbid(unsafe_code)]

pub mod decompress;
pub mod depsort;
pub mod elf;
pub mod modinfo;
