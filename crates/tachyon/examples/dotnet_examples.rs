//! The .NET SharedMemory library's four examples, in tachyon.
//!
//! Each section creates a primitive, opens a second handle on it (as a
//! second process would), writes 123 and 456 through the first handle and
//! reads them back through the second; the RPC section's opener adds the
//! two bytes of each request, and the owner asks for 123 + 10. The output is exactly the .NET
//! examples' output:
//!
//! ```text
//! SharedMemory.SharedArray:
//! 123
//! 456
//! SharedMemory.CircularBuffer:
//! 123
//! 456
//! SharedMemory.BufferReadWrite:
//! 123
//! 456
//! SharedMemory.RpcBuffer:
//! 133
//! ```
//!
//! Run with `cargo run --example dotnet_examples`.

use std::time::Duration;
use tachyon::{CircularBuffer, RpcBuffer, SharedArray, SharedBuffer};

/// How long a write or read may wait.
const TIMEOUT: Option<Duration> = Some(Duration::from_secs(1));

fn main() -> tachyon::Result<()> {
    // Names unique to this process, so that runs never collide.
    let name = |what: &str| format!("dotnet-example-{what}-{}", std::process::id());

    println!("SharedMemory.SharedArray:");
    {
        let producer = SharedArray::<i32>::create(&name("array"), 10)?;
        let consumer = SharedArray::<i32>::open(&name("array"))?;
        producer.set(0, 123)?;
        producer.set(producer.len() - 1, 456)?;
        println!("{}", consumer.get(0)?);
        println!("{}", consumer.get(consumer.len() - 1)?);
    }

    println!("SharedMemory.CircularBuffer:");
    {
        let producer = CircularBuffer::create(&name("circular"), 3, 4)?;
        let consumer = CircularBuffer::open(&name("circular"))?;
        producer.write_value(&123i32, TIMEOUT)?;
        producer.write_value(&456i32, TIMEOUT)?;
        println!("{}", consumer.read_value::<i32>(TIMEOUT)?);
        println!("{}", consumer.read_value::<i32>(TIMEOUT)?);
    }

    println!("SharedMemory.BufferReadWrite:");
    {
        let producer = SharedBuffer::create(&name("buffer"), 1024)?;
        let consumer = SharedBuffer::open(&name("buffer"))?;
        producer.write(0, &123i32)?;
        producer.write(1000, &456i32)?;
        println!("{}", consumer.read::<i32>(0)?);
        println!("{}", consumer.read::<i32>(1000)?);
    }

    println!("SharedMemory.RpcBuffer:");
    {
        let owner = RpcBuffer::create(&name("rpc"))?;
        let _opener = RpcBuffer::builder(&name("rpc"))
            // Add the two bytes together.
            .handler(|_msg_id, payload: &[u8]| {
                Ok::<_, String>((i32::from(payload[0]) + i32::from(payload[1])).to_le_bytes().to_vec())
            })
            .open()?;
        let result = owner.call(&[123, 10])?;
        let sum = i32::from_le_bytes(result.try_into().map_err(|_| tachyon::Error::Corrupt {
            what: tachyon::Corruption::BadField { field: "rpc result length", value: 0 },
        })?);
        println!("{sum}");
    }
    Ok(())
}
