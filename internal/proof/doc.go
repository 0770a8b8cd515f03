// Package proof runs Sluice as deployed — several `sluice serve` processes
// sharing a real redis-server — under seeded traffic and a fault schedule,
// records every decision at the clients, and checks the history offline
// with package check (which imports nothing of Sluice). The short matrix
// runs in the test suite (TestShortFaultMatrix).
package proof
