//! `airlock-rootfs`: placeholder until the commands land.

fn main() {}
