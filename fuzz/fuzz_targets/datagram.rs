//! Every wire decoder: parse, and round-trip whatever parses.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tether_testkit::fuzz::datagram(data));
