//! What can stop the agent from opening its virtio-serial port.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// The virtio-serial port could not be found or opened.
#[derive(Debug, thiserror::Error)]
pub enum SerialError {
    /// No port with the name appeared in time.
    #[error(
        "no virtio-serial port named {name:?} appeared within {waited:?}; \
         the VM needs -device virtserialport,name={name} and the virtio_console driver"
    )]
    NotFound {
        /// The port's name.
        name: String,
        /// How long the agent waited.
        waited: Duration,
    },
    /// The port's device node could not be opened.
    #[error("cannot open virtio-serial port {name:?} at {}", path.display())]
    Open {
        /// The port's name.
        name: String,
        /// Its device node.
        path: PathBuf,
        /// Why opening failed.
        #[source]
        source: io::Error,
    },
    /// The port could not be registered with the async runtime.
    #[error("cannot poll virtio-serial port {name:?}")]
    Register {
        /// The port's name.
        name: String,
        /// Why registering failed.
        #[source]
        source: io::Error,
    },
}
