//! The API's gRPC codec: prost's, but a message that does not decode is
//! INVALID_ARGUMENT (reason `INVALID_ARGUMENT`), the client's fault, where
//! tonic's default says INTERNAL. `build.rs` makes the generated services
//! and clients use [`Codec`].

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, DecodeBuf};
use tonic::Status;
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

use crate::reason;
use crate::v1::ErrorReason;

/// prost's codec with decode failures as INVALID_ARGUMENT.
#[derive(Debug, Clone, Copy)]
pub struct Codec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for Codec<T, U> {
    fn default() -> Self {
        Codec(PhantomData)
    }
}

impl<T, U> tonic::codec::Codec for Codec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = Decoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        tonic::codec::Codec::encoder(&mut ProstCodec::<T, U>::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        Decoder(tonic::codec::Codec::decoder(
            &mut ProstCodec::<T, U>::default(),
        ))
    }
}

/// prost's decoder, its failures INVALID_ARGUMENT.
#[derive(Debug)]
pub struct Decoder<U>(ProstDecoder<U>);

impl<U: Message + Default> tonic::codec::Decoder for Decoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|status| {
            reason::status(
                ErrorReason::InvalidArgument,
                format!(
                    "a message that does not decode as {}: {}",
                    std::any::type_name::<U>()
                        .rsplit("::")
                        .next()
                        .unwrap_or("its type"),
                    status.message()
                ),
            )
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
