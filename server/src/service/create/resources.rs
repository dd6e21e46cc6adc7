//! The resources section of a create: `memory_mib` and `vcpus` (0: the
//! server's default), within [`limits`].

use tonic::Status;

use airlock_api::limits;

use crate::machine::{DEFAULT_MEMORY_MIB, DEFAULT_VCPUS};
use crate::validate;

/// A create's guest size, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resources {
    pub memory_mib: u32,
    pub vcpus: u32,
}

/// Guest memory and vCPUs: 0 is the default, anything else within the
/// bounds a client is told.
pub fn resources(memory_mib: u32, vcpus: u32) -> Result<Resources, Status> {
    let memory_mib = match memory_mib {
        0 => DEFAULT_MEMORY_MIB,
        mib => validate::within(
            "memory_mib",
            mib,
            limits::MIN_MEMORY_MIB,
            limits::MAX_MEMORY_MIB,
        )?,
    };
    let vcpus = match vcpus {
        0 => DEFAULT_VCPUS,
        n => validate::within("vcpus", n, limits::MIN_VCPUS, limits::MAX_VCPUS)?,
    };
    Ok(Resources { memory_mib, vcpus })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use airlock_api::reason::field_of;

    #[test]
    fn zero_is_the_default_and_the_bounds_are_inclusive() {
        assert_eq!(
            resources(0, 0).unwrap(),
            Resources {
                memory_mib: DEFAULT_MEMORY_MIB,
                vcpus: DEFAULT_VCPUS
            }
        );
        let edges = resources(limits::MAX_MEMORY_MIB, limits::MAX_VCPUS).unwrap();
        assert_eq!(edges.memory_mib, limits::MAX_MEMORY_MIB);
        assert!(resources(limits::MIN_MEMORY_MIB, 1).is_ok());
    }

    #[test]
    fn out_of_bounds_names_the_field_and_the_bounds() {
        let refused = resources(limits::MIN_MEMORY_MIB - 1, 0).unwrap_err();
        assert_eq!(field_of(&refused), Some("memory_mib"));
        assert!(
            refused.message().contains("is not within 64 to 65536"),
            "{refused:?}"
        );
        let refused = resources(0, limits::MAX_VCPUS + 1).unwrap_err();
        assert_eq!(field_of(&refused), Some("vcpus"));
    }
}
