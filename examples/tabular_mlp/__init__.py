"""An example of a team's own training package for trainstack (see README, "Your own training code")."""
