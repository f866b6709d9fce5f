"""The epochlog controller: kopf handlers over pure liveness, election and ISR decisions."""
