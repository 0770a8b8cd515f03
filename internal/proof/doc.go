// Package proof holds the short fault matrix (TestShortFaultMatrix): the
// schedules of package fleet marked Short, each run on several `sluice
// serve` processes sharing real Redis (and PostgreSQL for tenants), every
// decision recorded at the clients and the history checked offline by
// package check (which imports nothing of Sluice). The full matrix is
// `sluice-bench proof --seed N`.
package proof
