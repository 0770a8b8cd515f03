package headers

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestShedProblem(t *testing.T) {
	for _, p := range []Problem{
		Shed("adaptive_concurrency", "default", "busy"),
		Shed("fleet_usage", "", ""),
		{Status: 429, ViolatedPolicies: []string{"a"}, Layer: "x"},
	} {
		b := p.Marshal()
		var back Problem
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("Marshal(%+v) = %s: %v", p, b, err)
		}
		if !reflect.DeepEqual(back, p) {
			t.Errorf("Marshal(%+v) = %s decodes to %+v", p, b, back)
		}
	}
	got := string(Shed("worker_utilization", "sheddable", "busy").Marshal())
	want := `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"busy","layer":"worker_utilization","priority":"sheddable"}`
	if got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
