//go:build tools

// Package tools names the command this module builds, so that go mod tidy keeps it.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
