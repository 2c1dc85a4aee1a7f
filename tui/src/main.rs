//! The `iotop-bpf` binary: everything is in the library, whose modules are private to it.

fn main() -> std::process::ExitCode {
    iotop_bpf::main()
}
