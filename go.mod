module github.com/sluice-rl/sluice

go 1.26.8
