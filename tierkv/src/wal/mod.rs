//! Write-ahead log (in progress).
