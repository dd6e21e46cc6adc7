//! [`IdlePolicy`] and [`PausedCalls`] to and from the form an adoption
//! record keeps them in (see `crate::adopt`).

use super::{IdlePolicy, PausedCalls};
use crate::adopt::{RecordedIdlePolicy, RecordedPausedCalls};

impl From<IdlePolicy> for RecordedIdlePolicy {
    fn from(policy: IdlePolicy) -> Self {
        match policy {
            IdlePolicy::Pause => RecordedIdlePolicy::Pause,
            IdlePolicy::PauseToDisk => RecordedIdlePolicy::PauseToDisk,
            IdlePolicy::Stop => RecordedIdlePolicy::Stop,
        }
    }
}

impl From<RecordedIdlePolicy> for IdlePolicy {
    fn from(policy: RecordedIdlePolicy) -> Self {
        match policy {
            RecordedIdlePolicy::Pause => IdlePolicy::Pause,
            RecordedIdlePolicy::PauseToDisk => IdlePolicy::PauseToDisk,
            RecordedIdlePolicy::Stop => IdlePolicy::Stop,
        }
    }
}

impl From<PausedCalls> for RecordedPausedCalls {
    fn from(policy: PausedCalls) -> Self {
        match policy {
            PausedCalls::Resume => RecordedPausedCalls::Resume,
            PausedCalls::Wait => RecordedPausedCalls::Wait,
            PausedCalls::Fail => RecordedPausedCalls::Fail,
        }
    }
}

impl From<RecordedPausedCalls> for PausedCalls {
    fn from(policy: RecordedPausedCalls) -> Self {
        match policy {
            RecordedPausedCalls::Resume => PausedCalls::Resume,
            RecordedPausedCalls::Wait => PausedCalls::Wait,
            RecordedPausedCalls::Fail => PausedCalls::Fail,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_survive_their_record_form() {
        for policy in [IdlePolicy::Pause, IdlePolicy::PauseToDisk, IdlePolicy::Stop] {
            assert_eq!(IdlePolicy::from(RecordedIdlePolicy::from(policy)), policy);
        }
        for calls in [PausedCalls::Resume, PausedCalls::Wait, PausedCalls::Fail] {
            assert_eq!(PausedCalls::from(RecordedPausedCalls::from(calls)), calls);
        }
    }
}
