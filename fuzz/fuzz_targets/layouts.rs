//! The layouts beside the datagram (protected sample, wrapped key, credential, revocation
//! list): parse, and round-trip whatever parses.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tether_testkit::fuzz::layouts(data));
