//! Second viewers: the running tool (the live view, `serve`) publishes each closed interval
//! on a local socket, and `iotop-bpf attach` ([`crate::front::attach`]) shows it from another
//! terminal, with its own sort, selection, pause and step-back, and no privileges.
//!
//! - [`wire`]: the versioned frames both sides speak.
//! - [`publish`]: the tool's side, a pipeline tap. Each interval is encoded once, only while
//!   someone is attached, and offered to every viewer through a bounded queue of its own; a
//!   viewer that reads too slowly loses frames (counted, and told to it), never slows the
//!   tool.
//! - [`endpoint`]: where: the Unix socket (its file's permissions are the access control)
//!   and the optional TCP address (which needs a token); binding, discovery, clean-up.
//! - [`client`]: the viewer's side: connect, handshake, read intervals.

pub mod client;
pub mod endpoint;
pub mod publish;
pub mod wire;

#[cfg(test)]
mod tests;
