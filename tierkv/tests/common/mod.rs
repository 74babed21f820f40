//! Support shared by the integration tests (each test binary compiles
//! this module and uses part of it).
#![allow(dead_code)]

pub mod crash;
