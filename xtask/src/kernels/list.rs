//! The kernels of the matrix: Debian's own packages, pinned by version and checksum (a
//! mirror drops a version when a newer one comes: the download then says to pin the newer).

use super::{Expect, Kernel};
use crate::target::Target;

const SECURITY: &str = "http://deb.debian.org/debian-security/pool/updates/main/l";
const MAIN: &str = "http://deb.debian.org/debian/pool/main/l";

const DEB_5_10: (&str, &str) = (
    "linux-signed-amd64/linux-image-5.10.0-46-amd64_5.10.262-1_amd64.deb",
    "6d89bdf9a7c4458c64de7221edfb8e7b2c3279012636e4bb9d6bba4e6b7a67eb",
);
const DEB_6_1: (&str, &str) = (
    "linux-signed-amd64/linux-image-6.1.0-56-amd64_6.1.192-2_amd64.deb",
    "a86e2049672f52354c4536a089203b6c82639420424d31c91cf31a181fd4d8f1",
);
const DEB_6_12: (&str, &str) = (
    "linux-signed-6.12-amd64/linux-image-6.12.117%2bdeb12-amd64_6.12.117-1%7edeb12u1_amd64.deb",
    "803d36a7cda13355ae8152122470288b2636f19f1cb58162dd9d8b408af9b1b4",
);
/// From 7.x the image and the modules are packages of their own (`linux-binary-*`,
/// `linux-modules-*`, both under /usr/lib/modules/RELEASE); trixie-backports' newest.
const DEB_7_3_IMAGE: (&str, &str) = (
    "linux-signed-amd64/linux-binary-7.3.4%2bdeb13-amd64_7.3.4-1%7ebpo13%2b1_amd64.deb",
    "7e3248d03a84dcdda88c567aa8c4038f2e7795d2dd167b112c56f8901b6f513f",
);
const DEB_7_3_MODULES: (&str, &str) = (
    "linux/linux-modules-7.3.4%2bdeb13-amd64_7.3.4-1%7ebpo13%2b1_amd64.deb",
    "b3ea01922c9f133767a83cf6891c19b3693858ded617bf22d1e34f95382c08ea",
);
const DEB_6_1_ARM64: (&str, &str) = (
    "linux-signed-arm64/linux-image-6.1.0-56-arm64_6.1.192-2_arm64.deb",
    "6f4ed2d1cb9106bc977c2b1960008f175e2eed5740340634b7894e65ef5acc82",
);
const DEB_6_12_ARM64: (&str, &str) = (
    "linux-signed-6.12-arm64/linux-image-6.12.117%2bdeb12-arm64_6.12.117-1%7edeb12u1_arm64.deb",
    "29593b2ac908b9325be67b2bfb7252310d8500680bc05e89d540a9378abd01a1",
);

pub(super) const KERNELS: [Kernel; 7] = [
    Kernel {
        name: "5.10",
        who: "Debian 11",
        release: "5.10.0-46-amd64",
        arch: Target::X86_64,
        debs: &[(SECURITY, DEB_5_10)],
        append: "",
        expect: Expect::Everything,
        writeback: false,
        syscalls: "raw",
    },
    Kernel {
        name: "6.1",
        who: "Debian 12",
        release: "6.1.0-56-amd64",
        arch: Target::X86_64,
        debs: &[(SECURITY, DEB_6_1)],
        append: "",
        expect: Expect::Everything,
        writeback: false,
        syscalls: "trampolines",
    },
    Kernel {
        name: "6.12",
        who: "Debian 12 security, Debian 13",
        release: "6.12.117+deb12-amd64",
        arch: Target::X86_64,
        debs: &[(SECURITY, DEB_6_12)],
        append: "",
        expect: Expect::Everything,
        writeback: false,
        syscalls: "trampolines",
    },
    Kernel {
        name: "7.3",
        who: "Debian 13 backports, the newest",
        release: "7.3.4+deb13-amd64",
        arch: Target::X86_64,
        debs: &[(MAIN, DEB_7_3_IMAGE), (MAIN, DEB_7_3_MODULES)],
        append: "",
        expect: Expect::Everything,
        writeback: true,
        syscalls: "trampolines",
    },
    Kernel {
        name: "lockdown-6.12",
        who: "Debian 13's kernel booted with lockdown=confidentiality",
        release: "6.12.117+deb12-amd64",
        arch: Target::X86_64,
        debs: &[(SECURITY, DEB_6_12)],
        append: "lockdown=confidentiality",
        expect: Expect::Lockdown,
        writeback: false,
        syscalls: "none",
    },
    Kernel {
        name: "arm64-6.1",
        who: "Debian 12 arm64",
        release: "6.1.0-56-arm64",
        arch: Target::Aarch64,
        debs: &[(SECURITY, DEB_6_1_ARM64)],
        append: "",
        expect: Expect::Everything,
        writeback: false,
        syscalls: "raw",
    },
    Kernel {
        name: "arm64-6.12",
        who: "Debian 12 security arm64, Debian 13 arm64",
        release: "6.12.117+deb12-arm64",
        arch: Target::Aarch64,
        debs: &[(SECURITY, DEB_6_12_ARM64)],
        append: "",
        expect: Expect::Everything,
        writeback: false,
        syscalls: "trampolines",
    },
];
